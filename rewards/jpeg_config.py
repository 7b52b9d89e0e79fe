"""Config of reward=jpeg: built in, not differentiable (DDPO): minus the JPEG size in kB."""

from __future__ import annotations

from dataclasses import dataclass

from rewards.base_config import RewardConfig


@dataclass
class JpegRewardConfig(RewardConfig):
    _target_: str = "rewards.jpeg.JpegCompressibility"
    name: str = "jpeg"
    quality: int = 95


SCHEMAS = {"reward": {"jpeg": JpegRewardConfig}}
