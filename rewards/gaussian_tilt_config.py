"""Config of reward=gaussian_tilt: a differentiable toy reward with an analytic tilted target for Gaussian data
(rewards/gaussian_tilt.py), meant for model=toy_gaussian (experiment=toy_eam / toy_am)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from rewardflow.errors import ConfigErrors
from rewards.base_config import RewardConfig


class TiltKind(StrEnum):
    quadratic = "quadratic"  # -gamma/2 ||x - target||^2
    linear = "linear"  # direction . x


@dataclass
class GaussianTiltRewardConfig(RewardConfig):
    _target_: str = "rewards.gaussian_tilt.GaussianTiltReward"
    name: str = "gaussian_tilt"
    kind: TiltKind = TiltKind.quadratic
    gamma: float = 1.0
    target: list[float] = field(default_factory=lambda: [2.0, 1.0, -1.0])  # per image channel (1 or 3 values)
    direction: list[float] = field(default_factory=lambda: [1.0])

    @classmethod
    def check(cls, cfg: Any, errors: ConfigErrors) -> None:
        super().check(cfg, errors)
        for key in ("target", "direction"):
            n = len(getattr(cfg.reward, key))
            errors.require(n in (1, 3), f"reward.{key}", f"needs 1 or 3 values (one per image channel), got {n}")


SCHEMAS = {"reward": {"gaussian_tilt": GaussianTiltRewardConfig}}
