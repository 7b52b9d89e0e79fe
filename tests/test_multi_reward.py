"""reward=multi: weights, per-component normalisation, logging of raw component scores, config checks, and a short
GRPO run on the tiny Flux twin with the three tiny preference rewards (issue 7)."""

from __future__ import annotations

import json

import pytest
import torch

from conftest import compose
from launcher.components import build
from launcher.train.trainer import RunInfo, Trainer
from launcher.validate import validate
from methods.grpo import GRPO
from rewardflow.errors import ConfigError
from rewards.base import Reward
from rewards.base_config import RewardConfig
from rewards.color import ColorReward
from rewards.color_config import ColorRewardConfig
from rewards.jpeg import JpegCompressibility
from rewards.jpeg_config import JpegRewardConfig
from rewards.multi import MultiReward
from rewards.multi_config import MultiRewardConfig
from rewards.tiny_twins import tiny_reward_overrides


class Brightness(Reward):
    """Differentiable stand-in with a chosen scale: ``scale x mean pixel + offset``."""

    differentiable = True

    def __init__(self, scale: float = 1.0, offset: float = 0.0):
        super().__init__(RewardConfig(name="brightness"))
        self.scale, self.offset = scale, offset

    def score(self, images, prompts):
        return self.scale * images.mean((1, 2, 3)) + self.offset


PROMPTS = ["a red square", "a blue sky", "a red square", "a blue sky"]


def weighted(components: dict, weights: dict, **cfg) -> MultiReward:
    """reward=multi over rewards built here (``cfg``: the other MultiRewardConfig keys)."""
    return MultiReward(MultiRewardConfig(weights=weights, **cfg), components)


def images(n: int = 4, seed: int = 0) -> torch.Tensor:
    return torch.rand(n, 3, 16, 16, generator=torch.Generator().manual_seed(seed))


def test_weighted_sum_and_raw_component_metrics():
    small, big = Brightness(1.0), Brightness(30.0, offset=5.0)
    multi = weighted(
        {"small": small, "big": big, "held_out": ColorReward(ColorRewardConfig())},
        {"small": 2.0, "big": 0.5, "held_out": 0.0},
    )
    x = images()
    total = multi(x, PROMPTS)
    raw_small, raw_big = small.score(x, PROMPTS), big.score(x, PROMPTS)
    torch.testing.assert_close(total, 2.0 * raw_small + 0.5 * raw_big)  # weight 0: not in the sum
    metrics = multi.step_metrics()
    assert metrics["reward/small"] == pytest.approx(float(raw_small.mean()))
    assert metrics["reward/big"] == pytest.approx(float(raw_big.mean()))  # raw: before weighting
    assert metrics["reward/big_std"] == pytest.approx(float(raw_big.std(unbiased=False)), rel=1e-5)
    assert metrics["reward/held_out"] == pytest.approx(float(ColorReward(ColorRewardConfig()).score(x, PROMPTS).mean()))
    assert multi.step_metrics() == {}  # read once per step


def test_metrics_average_over_the_calls_of_a_step():
    multi = weighted({"b": Brightness()}, {"b": 1.0})
    x1, x2 = images(seed=1), images(n=2, seed=2)
    multi(x1, PROMPTS)
    multi(x2, PROMPTS[:2])
    both = torch.cat([x1, x2]).mean((1, 2, 3))
    assert multi.step_metrics()["reward/b"] == pytest.approx(float(both.mean()))


def test_batch_normalisation_balances_scales():
    multi = weighted(
        {"small": Brightness(0.01), "big": Brightness(100.0, 3.0)}, {"small": 1.0, "big": 1.0}, normalize="batch"
    )
    x = images()
    total = multi(x, PROMPTS)
    b = x.mean((1, 2, 3))
    z = (b - b.mean()) / b.std(unbiased=False)
    torch.testing.assert_close(total, 2 * z, atol=1e-4, rtol=1e-4)  # both components standardised
    with pytest.raises(ValueError, match="normalize=running"):
        multi(x[:1], PROMPTS[:1])


def test_running_normalisation_tracks_and_is_saved():
    multi = weighted({"b": Brightness(10.0)}, {"b": 1.0}, normalize="running", norm_momentum=0.5)
    x1, x2 = images(seed=1), images(seed=2) * 0.5
    first = multi(x1, PROMPTS)
    r1 = 10 * x1.mean((1, 2, 3))
    torch.testing.assert_close(first, (r1 - r1.mean()) / r1.std(unbiased=False), atol=1e-5, rtol=1e-5)
    multi(x2, PROMPTS)
    r2 = 10 * x2.mean((1, 2, 3))
    state = multi.state_dict()
    assert float(state["normalizers.b.mean"]) == pytest.approx(0.5 * float(r1.mean()) + 0.5 * float(r2.mean()))
    restored = weighted({"b": Brightness(10.0)}, {"b": 1.0}, normalize="running", norm_momentum=0.5)
    restored.load_state_dict(state)
    x3 = images(n=1, seed=3)
    torch.testing.assert_close(restored(x3, PROMPTS[:1]), multi(x3, PROMPTS[:1]))  # defined for one sample too


def test_gradient_flows_through_the_weighted_sum():
    multi = weighted(
        {"b": Brightness(3.0), "jpeg": JpegCompressibility(JpegRewardConfig())},
        {"b": 2.0, "jpeg": 0.0},
        normalize="running",
    )
    assert multi.differentiable  # jpeg has weight 0: logged, not optimised
    x = images().requires_grad_(True)
    multi(x, PROMPTS).sum().backward()
    assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
    assert "reward/jpeg" in multi.step_metrics()
    assert not weighted(
        {"b": Brightness(), "jpeg": JpegCompressibility(JpegRewardConfig())}, {"b": 1.0, "jpeg": 0.1}
    ).differentiable


# ------------------------------------------------------------------------------------------ config checks
class DifferentiableOnlyMethod(GRPO):
    requires_differentiable_reward = True


NEEDS_GRAD = f"method._target_={__name__}.DifferentiableOnlyMethod"
COLOR = ["+reward@reward.components.color=color", "+reward.weights.color=1.0"]
JPEG = ["+reward@reward.components.jpeg=jpeg"]


@pytest.mark.parametrize(
    "overrides,match",
    [
        ([*JPEG, "+reward.weights.jpeg=0.5", NEEDS_GRAD], "differentiable"),
        (["+reward.weights.nothing=1.0"], "must name exactly the components"),
        (["~reward.weights.clip"], "must name exactly the components"),
        (["reward.norm_momentum=0"], "reward.norm_momentum"),
        (["+reward@reward.components.mean=color", "+reward.weights.mean=1.0"], "reward.components.mean"),
        (["reward.components.clip.path=/nonexistent/clip"], "reward.components.clip.path"),
        ([*COLOR, "data.prompts=[a photo of a cat]"], "reward=color"),
    ],
)
def test_bad_multi_configs_fail_validation(overrides, match, tiny_rewards):
    cfg = compose(["reward=multi", *tiny_reward_overrides(tiny_rewards, "multi"), *overrides])
    with pytest.raises(ConfigError, match=match):
        validate(cfg)


def test_multi_differentiability_follows_its_weighted_components(tiny_rewards):
    base = ["reward=multi", *tiny_reward_overrides(tiny_rewards, "multi"), NEEDS_GRAD]
    validate(compose([*base, *COLOR]))  # preference rewards + colour: fine
    validate(compose([*base, *JPEG, "+reward.weights.jpeg=0"]))  # jpeg logged only: fine


def test_hydra_builds_the_components_with_their_weights(tiny_rewards):
    cfg = compose(["reward=multi", *tiny_reward_overrides(tiny_rewards, "multi"), "reward.weights.clip=0.25"])
    reward = build(cfg.reward, "reward")
    assert sorted(reward.components) == ["clip", "hps", "pickscore"]
    assert reward.weights == {"hps": 1.0, "pickscore": 1.0, "clip": 0.25}
    assert reward.components["pickscore"].divide_by == 26.0 and reward.components["clip"].divide_by == 100.0
    assert reward.differentiable


# --------------------------------------------------------------------------------------------- end to end
@pytest.mark.slow
@pytest.mark.parametrize("method", ["flow_grpo", "eam"])
def test_method_trains_on_tiny_flux_with_multi_reward(method, tiny_rewards, tmp_path):
    """GRPO scores the multi-reward without gradients; EAM differentiates the weighted sum through the VAE decode."""
    extra = ["method.endpoint_nfe=3", "method.loss_timesteps=2"] if method == "eam" else []
    cfg = compose(
        [
            "experiment=smoke",
            "logger=none",
            f"method={method}",
            "reward=multi",
            *tiny_reward_overrides(tiny_rewards, "multi"),
            "reward.weights.clip=0.5",
            *extra,
        ]
    )
    trainer = Trainer(cfg, RunInfo(run_dir=tmp_path))
    trainer.fit()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]
    for r in rows:
        for name in ("hps", "pickscore", "clip"):
            assert f"reward/{name}" in r and f"reward/{name}_std" in r
        weighted = r["reward/hps"] + r["reward/pickscore"] + 0.5 * r["reward/clip"]
        assert r["reward/mean"] == pytest.approx(weighted, abs=1e-5)  # normalize=none: the mean is linear
        assert r["health/skipped_updates"] == 0 and r["count/transformer_bwd"] > 0
    assert trainer.reward.components["hps"].model.training is False
