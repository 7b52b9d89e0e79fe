"""Config of reward=multi: a weighted sum of named rewards (rewards/multi.py). Components are reward options
composed under reward.components.<name> (conf/reward/multi.yaml), each with a weight reward.weights.<name>."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from rewards.base_config import RewardConfig


class Normalization(StrEnum):
    """What each component's score goes through before weighting (rewards/normalization.py)."""

    none = "none"  # the raw score
    batch = "batch"  # z-score over the scores of this call
    running = "running"  # z-score with an exponential moving mean and variance


@dataclass
class MultiRewardConfig(RewardConfig):
    _target_: str = "rewards.multi.MultiReward"
    name: str = "multi"
    components: dict[str, Any] = field(default_factory=dict)  # name -> a reward config (composed from options)
    weights: dict[str, float] = field(default_factory=dict)  # name -> weight; 0 = scored and logged only
    normalize: Normalization = Normalization.none
    norm_momentum: float = 0.05  # EMA rate of normalize=running statistics


SCHEMAS = {"reward": {"multi": MultiRewardConfig}}
