"""Config of reward=brightness: the image's mean luminance."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rewardflow.errors import ConfigErrors
from rewards.base_config import RewardConfig


@dataclass
class BrightnessRewardConfig(RewardConfig):
    _target_: str = "rewards.brightness.BrightnessReward"
    name: str = "brightness"
    channel_weights: list[float] = field(default_factory=lambda: [0.299, 0.587, 0.114])  # R, G, B: ITU-R BT.601
    # luma (non-negative, summing to 1, so the score stays in [0, 1])

    @classmethod
    def check(cls, cfg: Any, errors: ConfigErrors) -> None:
        super().check(cfg, errors)
        w = list(cfg.reward.channel_weights)
        errors.require(
            len(w) == 3 and min(w) >= 0 and abs(sum(w) - 1) < 1e-6,
            "reward.channel_weights",
            f"must be 3 non-negative weights (R, G, B) summing to 1 (got {w}). Fix: "
            f"reward.channel_weights=[0.299,0.587,0.114]",
        )


SCHEMAS = {"reward": {"brightness": BrightnessRewardConfig}}
