"""Config of reward=brightness: the image's mean luminance."""

from __future__ import annotations

from dataclasses import dataclass, field

from rewards.base_config import RewardConfig


@dataclass
class BrightnessRewardConfig(RewardConfig):
    _target_: str = "rewards.brightness.BrightnessReward"
    name: str = "brightness"
    channel_weights: list[float] = field(default_factory=lambda: [0.299, 0.587, 0.114])  # R, G, B: ITU-R BT.601
    # luma (non-negative, summing to 1, so the score stays in [0, 1])


SCHEMAS = {"reward": {"brightness": BrightnessRewardConfig}}
