"""End-to-end runs of the shared trainer loop on the tiny Flux twin (in-process, seconds each)."""

from __future__ import annotations

import json

import pytest
import torch

from conftest import compose, group_options
from families import NAMES
from launcher.train.trainer import RunInfo, Trainer, TrainingAborted
from methods.grpo import GRPO
from rewards.base import Reward

METRICS = [
    "step",
    "reward/mean",
    "reward/std",
    "reward/zero_std_frac",
    "adv/abs_mean",
    "loss",
    "policy/clip_frac",
    "policy/approx_kl",
    "grad_norm",
    "lr",
    "time/rollout_s",
    "time/reward_s",
    "time/update_s",
    "time/step_s",
    "time/wallclock_s",
    "time/gpu_hours",
    "count/transformer_fwd",
    "count/transformer_bwd",
]
GRPO_ONLY = {"reward/zero_std_frac", "adv/abs_mean", "policy/clip_frac", "policy/approx_kl"}  # advantage/ratio stats


def run_smoke(tmp_path, overrides):
    cfg = compose(["experiment=smoke", "logger=none", *overrides])
    trainer = Trainer(cfg, RunInfo(run_dir=tmp_path))
    trainer.fit()
    rows = [json.loads(l) for l in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    return trainer, rows


@pytest.mark.parametrize("method", group_options("method"))
def test_each_method_trains_and_logs_every_metric(method, tmp_path):
    trainer, rows = run_smoke(tmp_path, [f"method={method}", "trainer.sample_every=2"])
    assert [r["step"] for r in rows] == [0, 1, 2]
    expected = METRICS if isinstance(trainer.method, GRPO) else [k for k in METRICS if k not in GRPO_ONLY]
    for r in rows:
        missing = [k for k in expected if k not in r]
        assert not missing, f"{method}: missing metrics {missing}"
        assert r["count/transformer_bwd"] > 0 and r["count/transformer_fwd"] > r["count/transformer_bwd"]
    wall = [r["time/wallclock_s"] for r in rows]
    assert wall == sorted(wall) and rows[-1]["time/gpu_hours"] == pytest.approx(wall[-1] / 3600)
    assert (tmp_path / "reward_curve.png").stat().st_size > 1000
    # each step's grid, and its samples one file each (tests/test_media.py)
    assert sorted(p.name for p in (tmp_path / "samples").iterdir()) == [
        "step_00000",
        "step_00000.png",
        "step_00002",
        "step_00002.png",
    ]


TINY_TWINS = list(NAMES)  # every family's twin; weight variants such as tiny_flux_pretrained share tiny_flux's classes


@pytest.mark.slow
@pytest.mark.parametrize("model", TINY_TWINS)
@pytest.mark.parametrize("method", group_options("method"))
def test_each_method_runs_a_step_on_every_tiny_twin(method, model, tmp_path):
    """The method matrix over every family's tiny twin (each loaded through its real adapter, in its YAML's mode):
    one full step logs every metric, the transformer passes counted on the model are the ones the method declares
    for its config (``passes_per_sample``) with CFG counted as two evaluations per sample, and a full-fine-tuning
    reference (Flow-GRPO's KL) stays frozen."""
    extra = ["method.sampling_steps=9"] if method == "jagg" else []  # 8 trained steps: two groups of W = 4
    cfg = compose(
        [
            "experiment=smoke",
            "logger=none",
            f"method={method}",
            f"model={model}",
            "trainer.steps=1",
            "trainer.sample_every=1",
            *extra,
        ]
    )
    trainer = Trainer(cfg, RunInfo(run_dir=tmp_path))
    bb = trainer.backbone
    ref = [p.detach().clone() for p in bb._reference_model.parameters()] if bb._reference_model is not None else []
    before = [p.detach().clone() for p in trainer.params]
    row = trainer.train_step(0)
    expected = METRICS if isinstance(trainer.method, GRPO) else [k for k in METRICS if k not in GRPO_ONLY]
    missing = [k for k in expected if k not in row]
    assert not missing, f"{method} x {model}: missing metrics {missing}"
    assert row["health/skipped_updates"] == 0
    assert any(not torch.equal(p, q) for p, q in zip(trainer.params, before))
    cfg_factor = 2 if getattr(bb, "do_cfg", False) else 1  # after the method is built (NFT: no CFG)
    b = 4  # smoke: 2 prompts x 2 generations
    fwd, bwd = type(trainer.method).passes_per_sample(trainer.method.cfg)
    assert (row["count/transformer_fwd"], row["count/transformer_bwd"]) == (cfg_factor * b * fwd, cfg_factor * b * bwd)
    assert all(torch.equal(p, q) for p, q in zip(bb._reference_model.parameters(), ref)) if ref else True
    assert (tmp_path / "samples" / "step_00000.png").exists()


def test_transformer_pass_counts_follow_the_trained_step_rule(tmp_path):
    """Counters on the model: rollout = B x N forwards; update = one forward + backward per trained transition."""
    _, dance = run_smoke(tmp_path / "d", ["method=dance_grpo"])
    b, n = 4, 6  # smoke: 2 prompts x 2 generations, 6 steps
    trained = int(0.6 * (n - 1))  # DanceGRPO: floor(0.6 (N - 1)) random transitions
    assert dance[0]["count/transformer_fwd"] == b * n + b * trained
    assert dance[0]["count/transformer_bwd"] == b * trained
    _, fast = run_smoke(tmp_path / "f", ["method=flow_grpo_fast", "method.window_range=[0,4]"])
    assert fast[0]["count/transformer_bwd"] == b * 2  # window of 2 SDE steps
    _, flow = run_smoke(tmp_path / "g", ["method=flow_grpo", "method.kl_beta=0.1"])
    t = int(0.99 * n)  # Flow-GRPO trains N - 1 steps; KL adds a reference forward
    assert flow[0]["count/transformer_fwd"] == b * n + 2 * b * t and flow[0]["count/transformer_bwd"] == b * t
    assert "policy/kl_ref" in flow[0]


def test_lora_finetune_trains_only_the_adapter(tmp_path):
    cfg = compose(["experiment=smoke", "logger=none", "model.finetune=lora", "model.lora_rank=4"])
    trainer = Trainer(cfg, RunInfo(run_dir=tmp_path))
    named = dict(trainer.backbone.transformer.named_parameters())
    before = {k: v.detach().clone() for k, v in named.items()}
    trainer.fit()
    changed = {k for k, v in named.items() if not torch.equal(v, before[k])}
    assert changed and all("lora" in k for k in changed)
    assert all(not v.requires_grad for k, v in named.items() if "lora" not in k)
    exported = json.loads((tmp_path / "export" / "rewardflow_export.json").read_text())  # trainer.export
    assert exported["finetune"] == "lora" and (tmp_path / "export" / "pytorch_lora_weights.safetensors").exists()


def test_full_finetune_exports_a_transformer_diffusers_loads(tmp_path):
    from diffusers import FluxTransformer2DModel

    trainer, _ = run_smoke(tmp_path, ["model.finetune=full"])
    loaded = FluxTransformer2DModel.from_pretrained(tmp_path / "export", subfolder="transformer")
    trained = trainer.backbone.transformer.state_dict()
    assert all(torch.equal(v, trained[k]) for k, v in loaded.state_dict().items())


class NaNReward(Reward):
    """Returns NaN for the first ``bad`` calls, then a finite score."""

    calls = 0
    bad = 10**9

    def score(self, images, prompts):
        NaNReward.calls += 1
        out = images.mean((1, 2, 3))
        return out * float("nan") if NaNReward.calls <= NaNReward.bad else out


def test_nonfinite_rewards_skip_updates_then_abort(tmp_path):
    NaNReward.calls, NaNReward.bad = 0, 1
    cfg = compose(["experiment=smoke", "logger=none", f"reward._target_={__name__}.NaNReward"])
    trainer = Trainer(cfg, RunInfo(run_dir=tmp_path / "one"))
    params = [p.detach().clone() for p in trainer.params]
    trainer.train_step(0)  # NaN: no optimizer step
    assert all(torch.equal(p, q) for p, q in zip(trainer.params, params))
    assert trainer.logger.history[-1]["health/skipped_updates"] == 1
    trainer.train_step(1)  # finite again: trains, streak resets
    assert trainer.logger.history[-1]["health/skipped_updates"] == 0 and trainer.nonfinite_in_a_row == 0

    NaNReward.calls, NaNReward.bad = 0, 10**9
    cfg = compose(
        [
            "experiment=smoke",
            "logger=none",
            f"reward._target_={__name__}.NaNReward",
            "trainer.max_nonfinite_in_a_row=2",
            "trainer.steps=5",
        ]
    )
    with pytest.raises(TrainingAborted, match="2 steps in a row"):
        Trainer(cfg, RunInfo(run_dir=tmp_path / "abort")).fit()


def test_nonfinite_loss_skips_the_optimizer_step(tmp_path, monkeypatch):
    cfg = compose(["experiment=smoke", "logger=none"])
    trainer = Trainer(cfg, RunInfo(run_dir=tmp_path))
    original = trainer.method.step_loss

    def nan_loss(*a, **k):
        loss, stats = original(*a, **k)
        return loss * float("nan"), stats

    monkeypatch.setattr(trainer.method, "step_loss", nan_loss)
    params = [p.detach().clone() for p in trainer.params]
    trainer.train_step(0)
    assert all(torch.equal(p, q) for p, q in zip(trainer.params, params))
    assert trainer.logger.history[-1]["health/skipped_updates"] == 2  # both DanceGRPO updates skipped
