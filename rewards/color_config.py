"""Config of reward=color: built in, differentiable, no download: how strongly the image shows the colour its
prompt names."""

from __future__ import annotations

from dataclasses import dataclass

from rewards.base_config import RewardConfig


@dataclass
class ColorRewardConfig(RewardConfig):
    _target_: str = "rewards.color.ColorReward"
    name: str = "color"


SCHEMAS = {"reward": {"color": ColorRewardConfig}}
