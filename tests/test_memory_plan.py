"""The memory planner (launcher/plan/memory_plan.py, docs/memory.md): parameter counts from configs alone equal the
diffusers classes' and peft's, a plan reads no weights and imports no torch, every preset and family has a plan on
8 x 80 GB, the fixes it suggests do fit, and ``--plan`` prints before anything is built or submitted."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from conftest import ROOT, compose, group_options, rewardflow_cmd
from launcher.plan.fixes import plan_with_fixes, with_override
from launcher.plan.memory_plan import GiB, plan
from models import published_configs as pub
from models.param_inventory import INVENTORIES

EIGHT_GPUS = ["cluster=slurm", "cluster.gpus_per_node=8"]
CLASSES = {
    "flux": "FluxTransformer2DModel",
    "sd3": "SD3Transformer2DModel",
    "qwenimage": "QwenImageTransformer2DModel",
    "wan": "WanTransformer3DModel",
}


def tiny(family: str) -> dict:
    import importlib

    module = {"flux": "tiny_flux", "sd3": "tiny_sd3", "qwenimage": "tiny_qwenimage", "wan": "tiny_wan"}[family]
    return importlib.import_module(f"models.{module}").TRANSFORMER


CONFIGS = [
    ("flux", pub.FLUX_DEV),
    ("sd3", pub.SD35_MEDIUM),
    ("qwenimage", pub.QWEN_IMAGE),
    ("wan", pub.WAN21_T2V_1_3B),
    ("wan", pub.WAN21_T2V_14B),
]


@pytest.mark.parametrize(
    "family,config",
    CONFIGS + [(f, None) for f in CLASSES],
    ids=[f"{f}-{i}" for i, (f, _) in enumerate(CONFIGS)] + [f"{f}-tiny" for f in CLASSES],
)
def test_inventory_matches_the_diffusers_class_and_peft(family, config):
    import diffusers
    import torch
    from peft import LoraConfig

    config = config or tiny(family)
    with torch.device("meta"):
        model = getattr(diffusers, CLASSES[family])(**config)
    inv = INVENTORIES[family](config)
    assert inv.params == sum(p.numel() for p in model.parameters())
    assert inv.depth == sum(
        len(getattr(model, a))
        for a in ("transformer_blocks", "single_transformer_blocks", "blocks")
        if hasattr(model, a)
    )
    targets = ["to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out"]
    model.add_adapter(LoraConfig(r=4, lora_alpha=4, target_modules=targets))
    assert inv.lora_params(targets, 4) == sum(p.numel() for n, p in model.named_parameters() if "lora_" in n)


@pytest.mark.parametrize("family,module", [("flux", "tiny_flux"), ("qwenimage", "tiny_qwenimage"), ("wan", "tiny_wan")])
def test_the_plans_tokens_follow_a_local_vaes_downsampling(tmp_path, family, module):
    """A local ``model.path`` whose VAE downsamples by 2 or 4 (the tiny twins') gives 16 or 4 times the image tokens of
    the published VAEs' factor 8; the factor is read from ``vae/config.json`` and equals the saved VAE's encoder's."""
    import importlib
    import json

    import diffusers
    import torch

    from launcher.plan.model_sizes import call_size, transformer_config

    twin = importlib.import_module(f"models.{module}")
    cls = {"flux": diffusers.AutoencoderKL, "qwenimage": diffusers.AutoencoderKLQwenImage}.get(
        family, diffusers.AutoencoderKLWan
    )
    cls(**twin.VAE).save_pretrained(tmp_path / "vae")
    (tmp_path / "transformer").mkdir()
    (tmp_path / "transformer" / "config.json").write_text(json.dumps(twin.TRANSFORMER))
    name = {"flux": "flux", "qwenimage": "qwenimage", "wan": "wan2.1"}[family]
    side = 64
    local = cfg_of([f"model={name}", f"model.path={tmp_path}", f"model.height={side}", f"model.width={side}"])
    published = cfg_of([f"model={name}", f"model.height={side}", f"model.width={side}"])
    tconfig, _ = transformer_config(local["model"], family)
    size, size8 = (call_size(c["model"], family, tconfig) for c in (local, published))
    vae = cls.from_pretrained(tmp_path / "vae").eval()
    image = torch.zeros((1, 3, side, side) if family == "flux" else (1, 3, 1, side, side))
    with torch.no_grad():
        latent = vae.encode(image).latent_dist.mean
    factor = side // latent.shape[-1]
    assert factor < 8 and size.image_tokens == size8.image_tokens * (8 // factor) ** 2


def test_a_plan_imports_no_torch_and_reads_no_weights():
    code = (
        "import sys; from launcher.plan.cli import compose_runs; from launcher.plan.memory_plan import plan; "
        "[plan(cfg) for _, cfg in compose_runs(['experiment=flash_grpo_flux', 'cluster=slurm'])]; "
        "assert 'torch' not in sys.modules and 'diffusers' not in sys.modules, 'heavy import'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def cfg_of(overrides: list[str]) -> dict:
    return OmegaConf.to_container(compose(overrides), resolve=True)


PRESETS = [p for p in group_options("experiment")]
#: each family at its published size at DanceGRPO's scale on 8 GPUs (scripts/plan_presets.py)
RECIPE = "method=dance_grpo method.group_size=12 method.prompts_per_step=16 method.update_batch=2"
FAMILIES = [
    "model=flux",
    "model=sd35m",
    "model=qwenimage",
    "model=qwenimage model.finetune=full",
    "model=wan2.1",
    "model=wan2.1 model.path=Wan-AI/Wan2.1-T2V-14B-Diffusers",
]


@pytest.mark.parametrize("overrides", [[f"experiment={p}"] for p in PRESETS], ids=PRESETS)
def test_every_preset_fits_eight_80gb_gpus_or_names_its_rank_count(overrides):
    cfg = cfg_of([*overrides, *EIGHT_GPUS])
    result = plan_with_fixes(cfg)
    if cfg["model"]["name"] == "toy_gaussian":
        assert result is None  # the SOC toy is not a diffusers family: nothing to plan
        return
    assert result.world == 8 and result.gpu_bytes == 80 * GiB
    assert result.peak > 0 and {line.what for line in result.lines} >= {"gradients (fp32)", "rollout buffers"}
    assert result.fits or any("ranks" in f for f in result.fixes), result.table()


@pytest.mark.parametrize("family", FAMILIES)
def test_each_family_at_published_size_fits_or_gets_a_fix(family):
    result = plan_with_fixes(cfg_of([*family.split(), *RECIPE.split(), *EIGHT_GPUS]))
    text = result.table()
    assert ("fits" in text) != ("DOES NOT FIT" in text)
    assert result.fits or result.fixes, text


def apply(cfg: dict, fix: str) -> dict:
    for assignment in fix.split(" (")[0].split(" on ")[0].split():
        key, value = assignment.split("=")
        cfg = with_override(
            cfg, key, {"true": True, "false": False}.get(value, int(value) if value.isdigit() else value)
        )
    return cfg


def test_a_run_that_does_not_fit_gets_fixes_that_fit():
    cfg = cfg_of(
        [
            "model=qwenimage",
            "model.finetune=full",
            "model.activation_checkpointing=none",
            "method=dance_grpo",
            "method.update_batch=16",
            *EIGHT_GPUS,
        ]
    )
    result = plan_with_fixes(cfg)
    assert not result.fits and result.fixes
    assert plan(apply(cfg, result.fixes[0])).fits  # the first fix, applied, fits

    alone = cfg_of(["model=qwenimage", "model.finetune=full", "method=dance_grpo", "cluster=local"])
    one_gpu = plan_with_fixes(alone)  # 20 B parameters in fp32 + AdamW on one GPU
    last = one_gpu.fixes[-1]
    assert not one_gpu.fits and " ranks" in last
    ranks = int(re.search(r"(\d+) ranks", last).group(1))
    assert plan(alone if last.startswith("or ") else apply(alone, last), world=ranks).fits


def test_more_ranks_and_lower_memory_lines_move_the_right_way():
    cfg = cfg_of(["model=flux", "model.finetune=full", "method=flow_grpo", *EIGHT_GPUS])
    eight, one = plan(cfg), plan(cfg, world=1)
    assert eight.peak < one.peak
    lines = {line.what: line for line in eight.lines}
    assert lines["transformer (fp32 master weights)"].update == pytest.approx(11.90e9 * 4 / 8, rel=1e-3)
    bf16 = {line.what: line for line in plan(cfg).lines}["frozen reference (bfloat16)"]
    fp32 = {line.what: line for line in plan(with_override(cfg, "model.reference_dtype", "float32")).lines}
    assert fp32["frozen reference (float32)"].update == 2 * bf16.update
    precomputed = with_override(with_override(cfg, "model.text_encoders", "precompute"), "method.decode_chunk", 1)
    assert (
        plan(with_override(precomputed, "method.rollout_chunk", 2)).phase("rollout")
        < plan(precomputed).phase("rollout")
        < eight.phase("rollout")
    )


def test_hsdp_shards_the_states_over_one_node_only():
    two_nodes = ["model=flux", "model.finetune=full", "cluster=slurm", "cluster.nodes=2", "cluster.gpus_per_node=8"]
    fsdp, hsdp = (plan(cfg_of([*two_nodes, f"cluster.mesh={m}"])) for m in ("fsdp", "hsdp"))
    weights = "transformer (fp32 master weights)"
    assert fsdp.world == hsdp.world == 16
    assert {x.what: x for x in hsdp.lines}[weights].update == 2 * {x.what: x for x in fsdp.lines}[weights].update
    assert hsdp.peak > fsdp.peak


def test_the_command_line_plans_without_building_or_submitting(tmp_path):
    res = subprocess.run(
        [*rewardflow_cmd(), "experiment=flash_grpo_flux", *EIGHT_GPUS, f"output_root={tmp_path}", "--plan"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert res.returncode == 0, res.stderr
    assert "memory plan, per rank" in res.stdout and "fits" in res.stdout
    assert not any(tmp_path.iterdir())  # no run directory, no submitit folder
    bad = subprocess.run(
        [
            *rewardflow_cmd(),
            "model=qwenimage",
            "model.finetune=full",
            "method.update_batch=16",
            "model.activation_checkpointing=none",
            "--plan",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert bad.returncode == 1 and "DOES NOT FIT" in bad.stdout and "fix:" in bad.stdout
    typo = subprocess.run(
        [*rewardflow_cmd(), "model=flux", "model.resolution=720", "--plan"], capture_output=True, text=True, cwd=ROOT
    )
    assert typo.returncode == 2 and "Traceback" not in typo.stderr
    assert "config error" in typo.stderr and "model.resolution" in typo.stderr


def test_lora_activations_are_planned_from_the_lora_forward_on_attention_only():
    """A LoRA forward saves less than a full fine-tune's (a frozen linear keeps no input); an adapter beyond the
    calibrated attention projections keeps its layers' inputs too, so the plan takes the full figures there."""

    def activations(overrides: list[str]) -> float:
        lines = {line.what: line for line in plan(cfg_of(["model=flux", "method=dance_grpo", *overrides])).lines}
        return lines["training call: activations"].update

    full = activations(["model.finetune=full", "model.activation_checkpointing=none"])
    lora = activations(["model.finetune=lora", "model.activation_checkpointing=none"])
    beyond = activations(
        ["model.finetune=lora", "model.activation_checkpointing=none", "model.lora_targets=[to_q,to_k,ff.net.2]"]
    )
    prefixed = activations(
        [
            "model.finetune=lora",
            "model.activation_checkpointing=none",
            "model.lora_targets=[attn.to_q,attn.to_k,attn.to_v,attn.to_out.0]",
        ]
    )
    assert 0.3 * full < lora < 0.8 * full
    assert beyond == full
    assert prefixed == lora  # peft matches names by suffix: attn.to_q is the same projection as to_q
