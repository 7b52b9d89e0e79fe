"""method=diffusion_nft on the shared trainer: its gradient against the authors' loss on a real rollout, the lagging
sampling policy (full and LoRA), pass counts, config errors, resume and FSDP2 over 2 gloo processes."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from omegaconf import OmegaConf

from conftest import ROOT, compose, rewardflow_cmd
from dist_utils import run_distributed
from launcher.components import build
from launcher.train.trainer import RunInfo, Trainer
from launcher.validate import validate
from method_checks import crash_and_resume, full_grads, shard
from methods.diffusion_nft import DiffusionNFT
from rewardflow.errors import ConfigError
from test_diffusion_nft_math import authors_loss

SMOKE = ["experiment=smoke", "logger=none", "method=diffusion_nft"]


def _method(overrides=(), parallelize=None) -> DiffusionNFT:
    """Backbone and method from the composed config, as the trainer builds them (sharding, if any, before the
    method)."""
    cfg = compose([*SMOKE, *overrides])
    method_cfg = OmegaConf.to_object(cfg.method)
    torch.manual_seed(0)
    backbone = build(cfg.model, "model", keep_reference=DiffusionNFT.needs_reference(method_cfg))
    if parallelize is not None:
        parallelize(backbone)
    return DiffusionNFT(method_cfg, backbone)


def _lag(method: DiffusionNFT, seed: int = 1, scale: float = 0.05) -> None:
    """Make v_old differ from v (as after some training), deterministically."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for c in method.old_policy.copies.values():
            local = c.to_local() if hasattr(c, "to_local") else c
            full = torch.randn(c.shape, generator=g)
            if hasattr(c, "to_local"):  # the same perturbation on every rank's shard
                from torch.distributed.tensor import distribute_tensor

                full = distribute_tensor(full, c.device_mesh, c.placements).to_local()
            local.add_(scale * full)


def _scored_rollout(method: DiffusionNFT, seed: int = 0):
    rollout = method.rollout(["a red square", "a blue circle"], torch.Generator().manual_seed(seed))
    rollout.rewards = torch.linspace(0.1, 0.9, len(rollout))
    method.prepare_update(rollout)
    return rollout


# ---------------------------------------------------------------------------------------- gradient and policies
def test_backward_equals_the_authors_loss_on_a_real_rollout():
    """Two micro-batches of ``DiffusionNFT.backward`` give the gradient of the authors' per-timestep loss
    (train_nft_sd3.py:866-987: mean over the update's samples, divided by the T trained times), with x_t, v_old and
    v_ref recomputed here independently: the lagging weights loaded with ``load_state_dict``, the reference a copy."""
    method = _method(["method.kl_beta=0.01", "method.beta=0.1"])
    _lag(method)
    rollout = _scored_rollout(method)
    bb, cfg = method.backbone, method.cfg
    model = bb.transformer
    model.zero_grad(set_to_none=True)
    for mb in (torch.tensor([0, 1]), torch.tensor([2, 3])):
        method.backward(rollout, mb, 4)
    ours = full_grads(model)

    trained = copy.deepcopy(model.state_dict())
    lagging = {**trained, **{k: v.clone() for k, v in method.old_policy.copies.items()}}
    x0, steps = rollout.latents, rollout.train_steps
    noise = method.forward_noise(rollout, torch.arange(4))
    config = OmegaConf.create(
        {"beta": cfg.beta, "train": {"adv_clip_max": cfg.adv_clip_max, "adv_mode": cfg.adv_mode, "beta": cfg.kl_beta}}
    )
    model.zero_grad(set_to_none=True)
    for j in range(steps.shape[1]):
        t = method.sigmas[steps[:, j]].float()
        s = t.view(-1, *([1] * (x0.ndim - 1)))
        xt = (1 - s) * x0 + s * noise[:, j]
        with torch.no_grad():
            model.load_state_dict(lagging)
            v_old = bb.velocity(xt, t, rollout.embeds)
            model.load_state_dict(trained)
            with bb.reference():
                v_ref = bb.velocity(xt, t, rollout.embeds)
        loss = authors_loss(bb.velocity(xt, t, rollout.embeds), v_old, v_ref, x0, xt, t, rollout.advantages, config)
        (loss / steps.shape[1]).backward()
    theirs = full_grads(model)
    assert ours.keys() == theirs.keys()
    for k in theirs:
        torch.testing.assert_close(ours[k], theirs[k], rtol=1e-4, atol=1e-7, msg=k)


@pytest.mark.parametrize("finetune", ["full", "lora"])
def test_rollouts_sample_the_lagging_policy_which_follows_their_update(finetune):
    """The rollout is drawn by v_old, not by v; v_old starts as v, then moves as d v_old + (1 - d) v after each
    step. In LoRA mode v_old is a copy of the adapter only (their second adapter 'old'): base weights never move."""
    method = _method([f"model.finetune={finetune}", "model.lora_rank=4", "method.old_decay_rate=0.25"])
    model = method.backbone.transformer
    names = method.old_policy.names
    assert names and all(("lora_" in n) == (finetune == "lora") for n in names)
    params = dict(model.named_parameters())
    assert all(torch.equal(method.old_policy.copies[n], params[n]) for n in names)

    _lag(method)
    lagging = {n: c.clone() for n, c in method.old_policy.copies.items()}
    trained = {n: params[n].detach().clone() for n in names}
    frozen = {k: v.detach().clone() for k, v in params.items() if k not in names}
    drawn = method.rollout(["a red square"], torch.Generator().manual_seed(0)).latents
    assert all(torch.equal(params[n], trained[n]) for n in names)  # the swap put v back
    with torch.no_grad():  # the same weights, put in by hand, as v
        for n in names:
            params[n].copy_(lagging[n])
    method.old_policy.copies = {n: params[n].detach().clone() for n in names}
    assert torch.equal(method.rollout(["a red square"], torch.Generator().manual_seed(0)).latents, drawn)
    with torch.no_grad():
        for n in names:
            params[n].copy_(trained[n])
    method.old_policy.copies = {n: c.clone() for n, c in trained.items()}  # v_old = v draws otherwise
    assert not torch.equal(method.rollout(["a red square"], torch.Generator().manual_seed(0)).latents, drawn)
    method.old_policy.copies = {n: c.clone() for n, c in lagging.items()}

    method.end_step(1)  # 2 optimizer steps so far: d = min(0.25 x 2, 0.5)
    assert method.step_metrics() == {"nft/old_decay": 0.5}
    for n in names:
        torch.testing.assert_close(method.old_policy.copies[n], 0.5 * lagging[n] + 0.5 * trained[n])
    assert all(torch.equal(params[k], v) for k, v in frozen.items())


def test_a_rollout_keeps_only_final_latents_and_its_training_times():
    method = _method()
    rollout = method.rollout(["a red square", "a blue circle"], torch.Generator().manual_seed(0))
    b, n = 4, method.cfg.sampling_steps
    assert rollout.latents.shape == (b, *method.backbone.latent_shape) and rollout.log_probs is None
    t = rollout.train_steps
    assert t.shape == (b, int(0.99 * n)) and all(len(set(row.tolist())) == t.shape[1] for row in t)  # distinct
    assert len(rollout.extras["noise_seeds"]) == b


# -------------------------------------------------------------------------------------------- counts and config
@pytest.mark.parametrize(
    "overrides",
    [
        [],
        ["method.kl_beta=0"],
        ["model.finetune=lora", "model.lora_rank=4", "method.sampler=unipc", "method.updates_per_rollout=2"],
    ],
)
def test_pass_counts_per_step_are_the_declared_ones(tmp_path, overrides):
    cfg = compose([*SMOKE, "trainer.steps=1", *overrides])
    trainer = Trainer(cfg, RunInfo(run_dir=tmp_path))
    row = trainer.train_step(0)
    fwd, bwd = DiffusionNFT.passes_per_sample(cfg.method)
    n, t = cfg.method.sampling_steps, int(0.99 * cfg.method.sampling_steps)  # smoke: 6 steps, 5 trained
    assert (fwd, bwd) == (n + t * (3 if cfg.method.kl_beta > 0 else 2), t)
    assert (row["count/transformer_fwd"], row["count/transformer_bwd"]) == (4 * fwd, 4 * bwd)
    assert row["health/skipped_updates"] == 0 and ("nft/kl_ref" in row) == (cfg.method.kl_beta > 0)


@pytest.mark.parametrize(
    "overrides,match",
    [
        (["method.timestep_fraction=0.1"], r"method.timestep_fraction: .*Fix: method.timestep_fraction=0.167"),
        (["method.beta=0"], r"method.beta: must be > 0"),
        (["method.old_decay_max=1"], r"method.old_decay_max: must be in \[0, 1\)"),
        (["method.updates_per_rollout=3"], r"method.updates_per_rollout: must divide the 4 samples"),
    ],
)
def test_bad_values_fail_before_anything_is_built(overrides, match):
    with pytest.raises(ConfigError, match=match):
        validate(compose([*SMOKE, *overrides]))


def test_cfg_free_on_a_cfg_family(tmp_path, caplog):
    """A CFG family's guidance_scale (4.5 in tiny_sd35m's YAML) is turned off, with a warning: one transformer row
    per sample in every pass."""
    cfg = compose([*SMOKE, "model=tiny_sd35m", "trainer.steps=1"])
    assert cfg.model.guidance_scale == 4.5
    trainer = Trainer(cfg, RunInfo(run_dir=tmp_path))
    assert not trainer.backbone.do_cfg and "model.guidance_scale=4.5 is not used" in caplog.text
    row = trainer.train_step(0)
    assert row["count/transformer_fwd"] == 4 * DiffusionNFT.passes_per_sample(cfg.method)[0]  # one row per sample


# ------------------------------------------------------------------------------------------------------- resume
@pytest.mark.slow
@pytest.mark.parametrize("finetune", ["full", "lora"])
def test_interrupted_run_resumes_bitwise_with_its_sampling_policy(tmp_path, finetune):
    """As tests/test_resume.py, with v_old far from v (fast decay): the checkpoint must bring v_old back too."""
    cfg = compose(
        [
            *SMOKE,
            "trainer.steps=6",
            "trainer.ckpt_every=2",
            f"model.finetune={finetune}",
            "model.lora_rank=4",
            "method.old_decay_rate=0.2",
        ]
    )
    old_before: dict = {}

    def remember_the_sampling_policy(t):
        old_before.update({k: v.clone() for k, v in t.method.old_policy.copies.items()})

    ref, resumed = crash_and_resume(cfg, tmp_path, 4, 4, remember_the_sampling_policy)
    assert any(not torch.equal(old_before[k], resumed.method.old_policy.copies[k]) for k in old_before)
    for k, v in ref.method.old_policy.copies.items():
        assert torch.equal(v, resumed.method.old_policy.copies[k]), k


# --------------------------------------------------------------------------------------------------- FSDP2, 2 ranks
def _sharded_work(rank, world, overrides, expected_latents):
    method = _method(overrides, parallelize=shard)
    _lag(method)
    rollout = _scored_rollout(method)  # every rank draws the same rollout (same seed)
    same_rollout = torch.equal(rollout.latents, expected_latents)
    mine = torch.arange(len(rollout))[rank::world]  # each rank trains its half
    method.backbone.transformer.zero_grad(set_to_none=True)
    method.backward(rollout, mine, len(mine))
    grads = full_grads(method.backbone.transformer)
    method.end_step(0)
    old = {
        k: (c.full_tensor() if hasattr(c, "full_tensor") else c).clone() for k, c in method.old_policy.copies.items()
    }
    return same_rollout, rollout.latents, grads, old


@pytest.mark.slow
@pytest.mark.parametrize("finetune", ["full", "lora"])
def test_two_sharded_ranks_equal_one_process(finetune):
    """The v_old swap under FSDP2 (the root group keeps its gathered parameters after a no-grad forward, hence the
    reshard after every swap): the rollout, the gradient and the updated v_old equal the single-process ones."""
    # an fp32 reference: a bf16 one computes in bf16 in one process but is gathered to fp32 under FSDP2
    overrides = [
        f"model.finetune={finetune}",
        "model.lora_rank=4",
        "method.kl_beta=0.01",
        "model.reference_dtype=float32",
    ]
    old_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        method = _method(overrides)
        _lag(method)
        rollout = _scored_rollout(method)
        method.backbone.transformer.zero_grad(set_to_none=True)
        method.backward(rollout, torch.arange(len(rollout)), len(rollout))
        single = full_grads(method.backbone.transformer)
        method.end_step(0)
        ranks = run_distributed(_sharded_work, 2, overrides, rollout.latents)
    finally:
        torch.set_num_threads(old_threads)
    for _same, latents, grads, old in ranks:
        torch.testing.assert_close(latents, rollout.latents, rtol=1e-5, atol=1e-6)
        assert grads.keys() == single.keys()
        for k, v in single.items():
            torch.testing.assert_close(grads[k], v, rtol=1e-4, atol=1e-7, msg=k)
        for k, v in method.old_policy.copies.items():
            torch.testing.assert_close(old[k], v, rtol=1e-6, atol=1e-8, msg=k)


@pytest.mark.slow
def test_trains_and_checkpoints_on_two_local_ranks(tmp_path):
    """The real multi-rank trainer (cluster=local_multi, gloo, FSDP2): pass counts summed over ranks, and the end
    checkpoint holds the sharded v_old."""
    import subprocess

    proc = subprocess.run(
        [
            *rewardflow_cmd(),
            "cluster=local_multi",
            "cluster.tasks_per_node=2",
            *SMOKE,
            "trainer.steps=2",
            f"output_root={tmp_path}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (job,) = [p for p in next((tmp_path / "train" / "multiruns").iterdir()).iterdir() if p.name == "0"]
    rows = [json.loads(l) for l in (job / "metrics.jsonl").read_text().splitlines()]
    fwd, bwd = DiffusionNFT.passes_per_sample(compose(SMOKE).method)
    assert [(r["count/transformer_fwd"], r["count/transformer_bwd"]) for r in rows] == [(4 * fwd, 4 * bwd)] * 2
    import torch.distributed.checkpoint as dcp

    meta = dcp.FileSystemReader(str(job / "checkpoints" / "step_00000001")).read_metadata()
    assert any(k.startswith("method.old_policy.") for k in meta.state_dict_metadata)
