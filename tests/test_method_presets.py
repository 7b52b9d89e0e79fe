"""The presets of the methods adopted after DiffusionNFT (issue 30: MixGRPO, GRPO-Guard, Flow-DPPO) compose to their
authors' recipes, each value as conf/experiment/<preset>.yaml cites it from the reference code, whatever a method's or
a model's defaults become; and each fits 8 x 80 GB by the memory plan (docs/methods/mix_grpo.md#presets,
docs/methods/grpo_guard.md#presets, docs/methods/flow_dppo.md#presets)."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from conftest import compose
from launcher.plan.memory_plan import GiB, plan
from rewardflow.errors import ConfigErrors

EIGHT_GPUS = ["cluster=slurm", "cluster.gpus_per_node=8"]

#: Tencent-Hunyuan/MixGRPO @e5cdd6a scripts/finetune/finetune_flux_grpo_MixGRPO.sh on fastvideo/train_grpo_flux.py
MIX_GRPO_FLUX = {
    "method.name": "mix_grpo",
    "method.sampling_steps": 25,
    "method.shift": 3.0,
    "method.eta": 0.7,
    "method.group_size": 12,
    "method.prompts_per_step": 32,  # 32 GPUs x --train_batch_size 1
    "method.updates_per_rollout": 4,  # 12 samples per GPU / --gradient_accumulation_steps 3
    "method.window_size": 4,
    "method.window_shift_every": 25,
    "method.window_stride": 1,
    "method.clip_range": 1e-4,
    "method.adv_clip_max": 5.0,
    "method.kl_beta": 0.0,
    "method.ode_solver": "euler",
    "model.name": "flux",
    "model.finetune": "full",
    "model.height": 720,
    "model.width": 720,
    "model.guidance": 3.5,
    "optimizer.lr": 1e-5,
    "optimizer.weight_decay": 1e-4,
    "optimizer.betas": [0.9, 0.999],
    "optimizer.eps": 1e-8,
    "optimizer.scheduler": "constant",
    "trainer.max_grad_norm": 1.0,
    "trainer.steps": 300,
    "trainer.seed": 714,
    "trainer.ckpt_every": 50,
    "trainer.ema_decay": 0.0,
    "data.set": "hpdv2",  # data/prompts.txt: DanceGRPO's HPDv2 prompts, the same git blob
    "reward.name": "multi",
    "reward.normalize": "batch",
    "reward.weights": {"hps": 1.0, "pickscore": 1.0, "imagereward": 1.0, "clip": 0.0},
}
#: _Flash.sh: iters_per_group=20, dpm_algorithm_type="dpmsolver++" (order 2, midpoint, compress 0.4); the rest as above
MIX_GRPO_FLASH_FLUX = {
    **MIX_GRPO_FLUX,
    "method.name": "mix_grpo_flash",
    "method.window_shift_every": 20,
    "method.ode_solver": "dpm_solver_pp2",
    "method.dpm_solver_type": "midpoint",
    "method.post_window_compress": 0.4,
}
#: yifan123/flow_grpo @ac4c86e config/grpo.py general_ocr_sd3 on config/base.py, with GRPO-Guard's loss
GRPO_GUARD_SD35M = {
    "method.name": "grpo_guard",
    "method.ratio_norm": True,
    "method.grad_reweight": True,
    "method.clip_range": 2e-6,  # verl-omni's GRPO-Guard example
    "method.sampling_steps": 10,
    "method.group_size": 24,
    "method.prompts_per_step": 48,
    "method.updates_per_rollout": 2,
    "method.timestep_fraction": 0.99,
    "method.kl_beta": 0.04,
    "method.global_std": True,
    "model.name": "sd35m",
    "model.guidance_scale": 4.5,
    "model.height": 512,
    "model.max_sequence_length": 128,
    "model.lora_rank": 32,
    "model.lora_alpha": 64.0,
    "optimizer.lr": 3e-4,
    "optimizer.weight_decay": 1e-4,
    "trainer.seed": 42,
    "trainer.ckpt_every": 60,
    "trainer.ema_decay": 0.9,
    "trainer.ema_warmup": True,
    "trainer.export_ema": True,
    "eval.every": 60,
    "eval.use_ema": True,
    "eval.sampling_steps": 40,
    "eval.guidance": 4.5,
    "data.set": "ocr",
    "reward.name": "server",
}
#: Tencent-Hunyuan/UniRL @1a7b501 examples/diffusion/sd3_flowdppo.yaml
FLOW_DPPO_SD35M = {
    "method.name": "flow_dppo",
    "method.sampling_steps": 10,
    "method.eta": 0.7,
    "method.group_size": 16,
    "method.prompts_per_step": 48,
    "method.updates_per_rollout": 2,
    "method.sde_steps": 3,
    "method.sde_range": [0.0, 0.5],
    "method.kl_mask_threshold": 1e-5,
    "method.kl_std": "step",
    "method.kl_beta": 0.0,
    "method.update_batch": 8,
    "model.name": "sd35m",
    "model.guidance_scale": 1.0,
    "model.height": 512,
    "model.lora_rank": 32,
    "model.lora_alpha": 64.0,
    "optimizer.lr": 3e-4,
    "optimizer.weight_decay": 0.0,
    "trainer.max_grad_norm": 1.0,
    "trainer.steps": 10000,
    "trainer.seed": 42,
    "trainer.ema_decay": 0.0,
    "eval.guidance": 1.0,
    "data.set": "pickscore",
    "reward.name": "pickscore",
    "reward.divide_by": 26.0,
}
PRESETS = {
    "mix_grpo_flux": MIX_GRPO_FLUX,
    "mix_grpo_flash_flux": MIX_GRPO_FLASH_FLUX,
    "grpo_guard_sd35m": GRPO_GUARD_SD35M,
    "flow_dppo_sd35m": FLOW_DPPO_SD35M,
}
ATTN = ["attn.add_k_proj", "attn.add_q_proj", "attn.add_v_proj", "attn.to_add_out", "attn.to_k", "attn.to_out.0"]


def resolved(overrides: list[str]) -> dict:
    return OmegaConf.to_container(compose(overrides), resolve=True, enum_to_str=True)


def at(cfg: dict, dotted: str):
    for k in dotted.split("."):
        cfg = cfg[k]
    return cfg


@pytest.mark.parametrize("preset", PRESETS)
def test_a_preset_composes_to_its_authors_recipe(preset):
    cfg = resolved([f"experiment={preset}"])
    got = {key: at(cfg, key) for key in PRESETS[preset]}
    assert got == PRESETS[preset]
    if cfg["model"]["name"] == "sd35m":  # the attention projections only (SD3.5-M's attn2 is not adapted)
        assert cfg["model"]["lora_targets"] == [*ATTN, "attn.to_q", "attn.to_v"]


def test_mix_grpo_flux_trains_on_their_three_rewards():
    components = resolved(["experiment=mix_grpo_flux"])["reward"]["components"]
    assert {name: c["name"] for name, c in components.items()} == {
        "hps": "hps",
        "pickscore": "pickscore",
        "imagereward": "imagereward",
        "clip": "clip",
    }


def test_mix_grpo_flash_flux_is_mix_grpo_flux_but_the_method():
    flux, flash = (resolved([f"experiment={p}"]) for p in ("mix_grpo_flux", "mix_grpo_flash_flux"))
    assert {k: v for k, v in flux.items() if k != "method"} == {k: v for k, v in flash.items() if k != "method"}


def test_mix_grpo_flash_star_is_two_overrides():
    """MixGRPO-Flash* (_Flash*.sh: prog_overlap_step=0, dpm_post_compress_ratio=0.2) as the page documents it: the
    overrides pass the method's config checks and change nothing else."""
    star = ["method.window_stride=0", "method.post_window_compress=0.2"]
    cfg = compose(["experiment=mix_grpo_flash_flux", *star])
    run, errors = OmegaConf.to_object(cfg), ConfigErrors()
    type(run.method).check(run, errors)
    assert not errors.messages
    flash = resolved(["experiment=mix_grpo_flash_flux"])
    assert OmegaConf.to_container(cfg, resolve=True, enum_to_str=True) == {
        **flash,
        "method": {**flash["method"], "window_stride": 0, "post_window_compress": 0.2},
    }


@pytest.mark.parametrize("preset", PRESETS)
def test_a_preset_fits_eight_80gb_gpus(preset):
    result = plan(resolved([f"experiment={preset}", *EIGHT_GPUS]))
    assert result.world == 8 and result.gpu_bytes == 80 * GiB
    assert result.fits, result.table()
