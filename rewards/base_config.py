"""The config fields every reward shares (:class:`rewards.base.Reward`)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from omegaconf import MISSING


class FrameReduce(StrEnum):
    """How a video's per-frame scores become its score."""

    mean = "mean"  # mean over frames
    topk_mean = "topk_mean"  # mean of the best frame_topk_frac of the frames (the Flash-GRPO recipe: top 30 %)


@dataclass
class RewardConfig:
    _target_: str = MISSING
    name: str = MISSING
    frame_reduce: FrameReduce = FrameReduce.mean
    frame_topk_frac: float = 0.3
