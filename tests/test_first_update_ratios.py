"""The first-update ratio health metric (methods/first_update_ratios.py, docs/metrics.md#first-update-ratios)."""

from __future__ import annotations

import logging
import math

import pytest
import torch

from conftest import compose
from launcher.train.trainer import RunInfo, Trainer
from methods.first_update_ratios import EDGES, FirstUpdateRatios

GRPO_METHODS = [
    "dance_grpo",
    "flow_grpo",
    "flow_grpo_fast",
    "flash_grpo",
    "grpo_guard",
    "jagg",
    "mix_grpo_flash",
    "reinforce_grpo",
]


def probe(clip=1e-4, warn=0.05):
    return FirstUpdateRatios(clip, warn, "Fix: something")


def test_mean_max_and_clip_fraction_are_exact_over_the_first_update_only():
    p = probe()
    p.active = True
    p.add(torch.tensor([1.0, 1.0 + 3e-5, 1.0 - 2e-4], dtype=torch.float64))
    p.add(torch.tensor([1.0 + 1e-3], dtype=torch.float64))
    p.active = False
    p.add(torch.tensor([5.0]))  # a later update: its rows moved on purpose, never counted
    m = p.flush()
    assert m["health/first_update_ratio_dev_max"] == pytest.approx(1e-3)
    assert m["health/first_update_ratio_dev_mean"] == pytest.approx((3e-5 + 2e-4 + 1e-3) / 4, rel=1e-6)
    assert m["health/first_update_clip_frac"] == 0.5  # 2e-4 and 1e-3 exceed the 1e-4 clip
    assert p.flush() == {}  # flushed: the next step starts empty


def test_quantiles_are_the_upper_edges_of_their_histogram_bins():
    p = probe()
    p.active = True
    dev = torch.tensor([0.0] * 50 + [2e-7] * 40 + [3e-5] * 9 + [0.5])
    p.add(1.0 + dev.double())
    m = p.flush()
    edges = EDGES.tolist()
    assert m["health/first_update_ratio_dev_p50"] == edges[0]  # exact zeros fall in the first bin (<= 1e-9)
    p90 = next(e for e in edges if e >= 2e-7)
    p99 = next(e for e in edges if e >= 3e-5)
    assert m["health/first_update_ratio_dev_p90"] == p90 and p90 / 2e-7 < 10**0.25 + 1e-9
    assert m["health/first_update_ratio_dev_p99"] == p99 and p99 / 3e-5 < 10**0.25 + 1e-9


def test_a_nan_ratio_is_the_worst_drift_and_warns_once(caplog):
    p = probe(warn=0.05)
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            p.active = True
            p.add(torch.tensor([1.0, float("nan")]))
            m = p.flush()
            assert m["health/first_update_clip_frac"] == 0.5
            assert math.isinf(m["health/first_update_ratio_dev_max"])
            assert math.isinf(m["health/first_update_ratio_dev_p99"])
    warnings = [r for r in caplog.records if "clipped before any optimizer step" in r.getMessage()]
    assert len(warnings) == 1 and "Fix: something" in warnings[0].getMessage()


def test_no_rows_no_metrics():
    p = probe()
    p.active = True
    p.add(torch.empty(0))
    assert p.flush() == {}


@pytest.mark.parametrize("method", GRPO_METHODS)
def test_every_grpo_method_logs_a_first_update_drift_near_zero_in_fp32(tmp_path, method):
    """fp32 on the CPU: the rollout and the update compute the same velocities up to float rounding, so nothing
    is clipped and the drift sits far below the 1e-4 clip."""
    cfg = compose(["experiment=smoke", "logger=none", f"method={method}"])
    trainer = Trainer(cfg, RunInfo(run_dir=tmp_path))
    for step in range(2):
        row = trainer.train_step(step)
        assert row["health/first_update_clip_frac"] == 0.0
        assert 0.0 <= row["health/first_update_ratio_dev_max"] < 1e-5
        assert row["health/first_update_ratio_dev_p50"] <= row["health/first_update_ratio_dev_p99"]


@pytest.mark.parametrize("method", ["eam", "diffusion_nft"])
def test_methods_without_importance_ratios_log_none(tmp_path, method):
    cfg = compose(["experiment=smoke", "logger=none", f"method={method}"])
    row = Trainer(cfg, RunInfo(run_dir=tmp_path)).train_step(0)
    assert not any(k.startswith("health/first_update") for k in row)


def test_the_first_update_is_measured_before_any_optimizer_step(tmp_path):
    """Two updates per rollout: the metric covers the first one's rows only (the second one's ratios have moved
    with the first optimizer step at a large learning rate)."""
    cfg = compose(
        ["experiment=smoke", "logger=none", "method=dance_grpo", "method.updates_per_rollout=2", "optimizer.lr=1e-2"]
    )
    trainer = Trainer(cfg, RunInfo(run_dir=tmp_path))
    seen: list[torch.Tensor] = []
    method = trainer.method
    original = method.first_update.add

    def spy(ratio):
        seen.append((ratio.detach().clone(), method.first_update.active))
        original(ratio)

    method.first_update.add = spy
    row = trainer.train_step(0)
    first = torch.cat([r for r, active in seen if active])
    later = torch.cat([r for r, active in seen if not active])
    assert first.numel() and later.numel()
    assert row["health/first_update_ratio_dev_max"] == pytest.approx(float((first.double() - 1).abs().max()))
    assert float((later.double() - 1).abs().max()) > row["health/first_update_ratio_dev_max"]


@pytest.mark.parametrize("method", ["dance_grpo", "flow_grpo", "flash_grpo", "jagg"])
def test_match_update_shapes_gives_every_call_the_same_rows_and_the_same_training(tmp_path, method):
    """``method.match_update_shapes``: every transformer call of the rollout and of the update holds update_batch
    rows (batches of 8 samples, calls of 3: the last ones padded), and the step trains as without padding."""
    over = ["experiment=smoke", "logger=none", f"method={method}", "method.group_size=4", "method.update_batch=3"]
    rows, shapes = [], []
    for match in (False, True):
        cfg = compose([*over, f"method.match_update_shapes={str(match).lower()}"])
        trainer = Trainer(cfg, RunInfo(run_dir=tmp_path / str(match)))
        velocity = trainer.method.backbone.velocity
        calls: list[int] = []

        def spy(x, t, embeds, _velocity=velocity, _calls=calls):
            _calls.append(x.shape[0])
            return _velocity(x, t, embeds)

        trainer.method.backbone.velocity = spy
        rows.append(trainer.train_step(0))
        shapes.append(calls)
    assert len(set(shapes[0])) > 1  # without the option the rollout's calls are larger than the update's
    assert set(shapes[1]) == {3}
    assert rows[1]["loss"] == pytest.approx(rows[0]["loss"], rel=1e-5, abs=1e-7)
    assert rows[1]["grad_norm"] == pytest.approx(rows[0]["grad_norm"], rel=1e-5)
    assert rows[1]["health/first_update_ratio_dev_max"] < 1e-5
