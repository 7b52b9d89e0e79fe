"""reward=brightness, the example reward of docs/extending.md: its score, its gradient and its check hook."""

from __future__ import annotations

import pytest
import torch

from conftest import compose
from launcher.train.trainer import RunInfo, Trainer
from launcher.validate import validate
from rewardflow.errors import ConfigError
from rewards.brightness import BrightnessReward
from rewards.brightness_config import BrightnessRewardConfig


def test_score_is_the_mean_luma_and_differentiable(float64):
    reward = BrightnessReward(BrightnessRewardConfig())
    images = torch.rand(3, 3, 8, 8, generator=torch.Generator().manual_seed(0), requires_grad=True)
    score = reward(images, ["a cat"] * 3)
    r, g, b = images.detach().unbind(1)
    torch.testing.assert_close(score, (0.299 * r + 0.587 * g + 0.114 * b).mean((1, 2)))
    (grad,) = torch.autograd.grad(score.sum(), images)
    torch.testing.assert_close(grad[0, :, 0, 0], torch.tensor([0.299, 0.587, 0.114]) / 64)


@pytest.mark.parametrize("weights", ["[1,1,1]", "[0.5,0.5]", "[1.5,-0.5,0]"])
def test_bad_channel_weights_fail_before_anything_is_built(weights, no_model_building, tmp_path):
    with pytest.raises(ConfigError, match=r"reward.channel_weights: must be 3 non-negative weights"):
        Trainer(compose(["reward=brightness", f"reward.channel_weights={weights}"]), RunInfo(run_dir=tmp_path))


def test_trains_an_adjoint_method(tmp_path):
    """Differentiable, so the adjoint methods take it: one EAM step on the tiny FLUX twin."""
    cfg = compose(["experiment=smoke", "logger=none", "method=eam", "reward=brightness", "trainer.steps=1"])
    validate(cfg)
    row = Trainer(cfg, RunInfo(run_dir=tmp_path)).train_step(0)
    assert 0 <= row["reward/mean"] <= 1 and row["health/skipped_updates"] == 0 and row["count/transformer_bwd"] > 0
