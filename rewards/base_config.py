"""The config fields every reward shares (:class:`rewards.base.Reward`) and the config-check hook of the reward group
(run by ``launcher.validate`` before torch is imported: docs/configuration.md#validation)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from omegaconf import MISSING

from rewardflow.dtypes import Dtype
from rewardflow.errors import ConfigErrors


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

    @classmethod
    def check(cls, cfg: Any, errors: ConfigErrors) -> None:
        """The config-check hook of the reward group: record in ``errors`` the values this reward cannot run with.
        ``cfg`` is the whole run config (typed; the reward's is ``cfg.reward``). It imports no torch, so these errors
        come before anything heavy is loaded; what needs the reward's code is the reward class's
        ``check_with_code``. A reward nested in ``reward=multi`` is checked with ``cfg.reward`` set to its own config
        and ``errors`` naming its place (``errors.key("reward.path")``)."""
        r = cfg.reward
        if r.frame_reduce == FrameReduce.topk_mean:
            errors.require(
                0 < r.frame_topk_frac <= 1,
                "reward.frame_topk_frac",
                f"must be in (0, 1] with "
                f"frame_reduce=topk_mean (got {r.frame_topk_frac}): the fraction of the frames averaged",
            )


def check_compute_dtype(cfg: Any, errors: ConfigErrors) -> None:
    """``reward.dtype`` of the rewards that run a network (CLIP-style models: rewards/clip_base.py)."""
    errors.require(
        cfg.reward.dtype not in (Dtype.float64, Dtype.fp64),
        "reward.dtype",
        f"{cfg.reward.dtype} is not a compute dtype of the reward models. Fix: reward.dtype=auto",
    )
