"""Config of reward=multi: a weighted sum of named rewards (rewards/multi.py). Components are reward options
composed under reward.components.<name> (conf/reward/multi.yaml), each with a weight reward.weights.<name>."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from rewardflow.errors import ConfigErrors
from rewards.base_config import RewardConfig

#: metric names under reward/ that a component's name (reward/<name>) may not take
RESERVED = ("mean", "std", "zero_std_frac")


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

    @classmethod
    def check(cls, cfg: Any, errors: ConfigErrors) -> None:
        """The components and weights, then each component's own config rules (its config class's ``check``, under
        its key); what needs a component's code runs in rewards/multi.py."""
        super().check(cfg, errors)
        r, key = cfg.reward, errors.key("reward")
        components, weights = r.components, r.weights
        errors.require(
            bool(components),
            "reward.components",
            f"is empty. Fix: add one, e.g. +reward@{key}.components.hps=hps +{key}.weights.hps=1.0",
        )
        errors.require(
            set(components) == set(weights),
            "reward.weights",
            f"must name exactly the components: "
            f"components {sorted(components)}, weights {sorted(weights)}. Fix: set {key}.weights.<name> "
            f"for each component (0 = score and log only)",
        )
        for n, w in weights.items():
            errors.require(
                math.isfinite(w),
                f"reward.weights.{n}",
                f"must be a finite number (got {w}): a NaN or "
                f"infinite weight makes every step's reward NaN. Fix: {key}.weights.{n}=1.0 (0 = score "
                f"and log only)",
            )
        errors.require(0 < r.norm_momentum <= 1, "reward.norm_momentum", f"must be in (0, 1] (got {r.norm_momentum})")
        for n, c in components.items():
            if not errors.require(
                n not in RESERVED and "/" not in n,
                f"reward.components.{n}",
                f"the name is taken by reward/{n} or not a metric name; rename the component",
            ):
                continue
            hook = getattr(type(c), "check", None)
            if callable(hook) and dataclasses.is_dataclass(c):
                hook(dataclasses.replace(cfg, reward=c), errors.under("reward", f"reward.components.{n}"))


SCHEMAS = {"reward": {"multi": MultiRewardConfig}}
