"""Schemas of the reward base and the built-in rewards."""
from __future__ import annotations

from dataclasses import dataclass

from omegaconf import MISSING

@dataclass
class RewardConfig:
    _target_: str = MISSING
    name: str = MISSING
    frame_reduce: str = "mean"        # videos: mean over frames | topk_mean (mean of the best frame_topk_frac)
    frame_topk_frac: float = 0.3


@dataclass
class JpegRewardConfig(RewardConfig):
    _target_: str = "rewards.jpeg.JpegCompressibility"
    name: str = "jpeg"
    quality: int = 95


SCHEMAS = {"reward": {"base": RewardConfig, "jpeg": JpegRewardConfig}}
