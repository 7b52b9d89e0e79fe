"""method=eam and method=adjoint_matching as methods of the shared trainer loop (issue 5): config rejection, transformer
pass counts per iteration, the control parameterisation (full and LoRA), and end-to-end runs on the tiny Flux twin."""

from __future__ import annotations

import json

import pytest
import torch

from conftest import compose
from launcher.train.trainer import RunInfo, Trainer
from launcher.validate import validate
from methods.linear_base import LinearMemorylessBase
from methods.memoryless import MemorylessSchedule
from methods.time_convention import velocity_am
from rewardflow.errors import ConfigError

SOC = ("eam", "adjoint_matching")


# ------------------------------------------------------------------------------------------------------ config
def test_non_differentiable_reward_is_rejected_up_front():
    for method in SOC:
        with pytest.raises(ConfigError, match=f"method={method} needs a differentiable reward.*reward=color"):
            validate(compose([f"method={method}", "reward=jpeg"]))
        validate(compose([f"method={method}", "reward=color"]))


BAD = [
    ("eam", ["method.c=0"], "method.c"),
    ("eam", ["method.delta=0.7"], "method.delta"),
    ("eam", ["method.time_sampling=am_grid", "method.loss_timesteps=50"], "method.loss_timesteps"),
    ("eam", ["method.endpoint_nfe=0"], "method.endpoint_nfe"),
    ("eam", ["method.reward_scale=0"], "method.reward_scale"),
    ("adjoint_matching", ["method.sigma_offset=0"], "method.sigma_offset"),
    ("adjoint_matching", ["method.loss_last_steps=0", "method.loss_random_steps=0"], "method.loss_last_steps"),
    ("adjoint_matching", ["method.updates_per_rollout=3"], "method.updates_per_rollout"),
]


@pytest.mark.parametrize("method,overrides,key", BAD, ids=[f"{m}:{k}" for m, _, k in BAD])
def test_bad_values_are_rejected_naming_the_key(method, overrides, key, no_model_building, tmp_path):
    with pytest.raises(ConfigError) as err:
        Trainer(compose([f"method={method}", *overrides]), RunInfo(run_dir=tmp_path))
    assert key in str(err.value)


# ------------------------------------------------------------------------------------------- NFE per iteration
def one_step(tmp_path, overrides, run: bool = True):
    """A toy trainer (8 samples per step, calls of 3 rows) after one training step (``run``) or before any."""
    cfg = compose(
        [
            "logger=none",
            "trainer.progress=false",
            "trainer.sample_every=0",
            "model=toy_gaussian",
            "reward=gaussian_tilt",
            "method.group_size=4",
            "method.prompts_per_step=2",
            "method.update_batch=3",
            "method.reward_scale=0.8",
            *overrides,
        ]
    )
    trainer = Trainer(cfg, RunInfo(run_dir=tmp_path))
    return trainer, (trainer.train_step(0) if run else None)


@pytest.mark.parametrize(
    "variant,fwd,bwd",
    [
        # B = 8 samples; EAM: endpoint_nfe + 1 (Tweedie) forwards and K_t loss forward+backward per sample
        ([], 10 + 1 + 4, 4),
        (["method.endpoint_nfe=7", "method.loss_timesteps=3"], 7 + 1 + 3, 3),
        (["method.terminal_score=tweedie_naive"], 10 + 1 + 4, 4),
        (["method.terminal_score=anchor"], 10 + 4 + 4, 4),  # no Tweedie, a frozen forward per loss time
        (["model.finetune=lora"], 10 + 1 + 4, 4),
    ],
)
def test_eam_transformer_passes_per_iteration(variant, fwd, bwd, tmp_path):
    _, m = one_step(tmp_path, ["method=eam", *variant])
    assert (m["count/transformer_fwd"], m["count/transformer_bwd"]) == (8 * fwd, 8 * bwd)


@pytest.mark.parametrize(
    "variant,fwd,bwd",
    [
        # AM: K rollout forwards, 1 denoising forward, K VJPs (forward + backward) at X_K..X_1, v_pre(X_0), |S| loss
        # forward+backward per sample
        (["method.sampling_steps=40"], 40 + 1 + 40 + 1 + 20, 40 + 20),
        (
            ["method.sampling_steps=12", "method.loss_last_steps=3", "method.loss_random_steps=2"],
            12 + 1 + 12 + 1 + 5,
            12 + 5,
        ),
        (
            ["method.sampling_steps=12", "method.denoise_last_step=false"],
            12 + 12 + 1 + 12,
            12 + 12,
        ),  # |S| = min(10, 12) + 2
        (["method.sampling_steps=40", "model.finetune=lora"], 40 + 1 + 40 + 1 + 20, 40 + 20),
    ],
)
def test_adjoint_matching_transformer_passes_per_iteration(variant, fwd, bwd, tmp_path):
    _, m = one_step(tmp_path, ["method=adjoint_matching", *variant])
    assert (m["count/transformer_fwd"], m["count/transformer_bwd"]) == (8 * fwd, 8 * bwd)


def test_am_loss_steps_are_the_last_ones_plus_random_earlier_ones(tmp_path):
    trainer, _ = one_step(tmp_path, ["method=adjoint_matching", "method.sampling_steps=40"])
    steps = trainer.method.loss_steps(64, torch.Generator().manual_seed(0))
    assert steps.shape == (64, 20)
    assert bool((steps[:, 10:] == torch.arange(30, 40)).all())
    early = steps[:, :10]
    assert bool((early < 30).all()) and all(len(set(r.tolist())) == 10 for r in early)
    assert len(set(early.flatten().tolist())) > 25  # drawn per sample


def test_eam_loss_time_modes(tmp_path):
    trainer, _ = one_step(tmp_path, ["method=eam"])
    method, gen = trainer.method, torch.Generator().manual_seed(0)
    t = method.loss_times(256, gen)
    assert t.shape == (256, 4) and float(t.min()) >= 0.025 and float(t.max()) <= 0.975
    method.cfg.time_sampling = "stratified"
    t = method.loss_times(256, gen)
    edges = 0.025 + 0.95 * torch.arange(5) / 4
    assert all(bool(((t[:, j] >= edges[j]) & (t[:, j] <= edges[j + 1])).all()) for j in range(4))
    method.cfg.time_sampling, method.cfg.loss_timesteps, method.cfg.sampling_steps = "am_grid", 20, 40
    t = method.loss_times(16, gen)
    assert torch.allclose(t[:, 10:], torch.arange(30, 40, dtype=torch.float64).expand(16, -1) / 40)


# -------------------------------------------------------------------------------------- control parameterisation
@pytest.mark.parametrize("finetune", ["full", "lora"])
def test_control_is_zero_at_initialisation_and_moves_with_training(finetune, tmp_path):
    """u = (2 / sigma) (v_theta - v_pre) with v_pre = the same weights with the adapter disabled (LoRA) or a frozen copy
    (full): exactly zero before training, non-zero after; the pretrained velocity never changes. EAM's control
    relative to its *linear* base is (2 / sigma) (v_pre - v_c) at initialisation (invariant 11)."""
    trainer, _ = one_step(
        tmp_path,
        ["method=adjoint_matching", "method.sampling_steps=8", "method.loss_clip=0", f"model.finetune={finetune}"],
    )
    bb, method = trainer.backbone, trainer.method
    assert len(bb.transformer_modules()) == (1 if finetune == "lora" else 2)
    fresh, _ = one_step(tmp_path / "fresh", ["method=eam", f"model.finetune={finetune}"], run=False)
    x = torch.randn(16, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    t = torch.linspace(0.05, 0.95, 16, dtype=torch.float64)
    emb = fresh.backbone.encode_prompts(["p"] * 16)
    s = MemorylessSchedule()
    with torch.no_grad():
        v0, v0_pre = fresh.method.velocity(x, t, emb), fresh.method.pretrained_velocity(x, t, emb)
        assert torch.equal(s.control(v0, v0_pre, t), torch.zeros_like(x))
        assert torch.allclose(v0_pre, fresh.backbone.pretrained_velocity_am(x, t), atol=1e-12)
        u_lin = s.control(v0, LinearMemorylessBase(1.0).velocity(x, t), t)
        assert float(u_lin.abs().max()) > 0.1
        # after one AM step (the trainer already ran it), the control is non-zero, the base unchanged
        v1, v1_pre = method.velocity(x, t, emb), method.pretrained_velocity(x, t, emb)
        assert float(s.control(v1, v1_pre, t).abs().max()) > 0
        assert torch.allclose(v1_pre, bb.pretrained_velocity_am(x, t), atol=1e-12)
        assert torch.allclose(velocity_am(bb, x, t, emb), v1)


# ------------------------------------------------------------------------------- end to end on the tiny Flux twin
@pytest.mark.slow
@pytest.mark.parametrize("method", SOC)
@pytest.mark.parametrize("finetune", ["full", "lora"])
def test_tiny_flux_smoke_run(method, finetune, tmp_path):
    """3 steps of experiment=smoke (2 prompts x 2, reward=color) train, log every metric and count passes exactly."""
    cfg = compose(
        [
            "experiment=smoke",
            "logger=none",
            f"method={method}",
            f"model.finetune={finetune}",
            "model.lora_rank=4",
            "trainer.sample_every=2",
        ]
    )
    trainer = Trainer(cfg, RunInfo(run_dir=tmp_path))
    named = dict(trainer.backbone.transformer.named_parameters())
    before = {k: v.detach().clone() for k, v in named.items()}
    trainer.fit()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]
    b = 4
    per_sample = {"eam": (10 + 1 + 4, 4), "adjoint_matching": (6 + 1 + 6 + 1 + 6, 6 + 6)}[method]  # smoke: K = 6
    for r in rows:
        for key in (
            "reward/mean",
            "reward/std",
            "loss",
            "grad_norm",
            "lr",
            "time/rollout_s",
            "time/reward_s",
            "time/update_s",
            "time/step_s",
            "time/wallclock_s",
            "time/gpu_hours",
            "soc/reward_grad_norm",
            "soc/loss_clipped_frac",
        ):
            assert key in r and r[key] == r[key], f"{method}: {key} missing or NaN"
        assert (r["count/transformer_fwd"], r["count/transformer_bwd"]) == (b * per_sample[0], b * per_sample[1])
        assert r["health/skipped_updates"] == 0
    extra = {"eam": "soc/terminal_score_norm", "adjoint_matching": "soc/adjoint_norm_t0"}[method]
    assert extra in rows[0]
    changed = {k for k, v in named.items() if not torch.equal(v, before[k])}
    assert changed
    if finetune == "lora":
        assert all("lora" in k for k in changed)
        assert len(trainer.backbone.transformer_modules()) == 1  # base = adapter disabled, not a copy
    assert (tmp_path / "samples" / "step_00002.png").exists()
