"""Config of reward=color: built in, differentiable, no download: how strongly the image shows the colour its
prompt names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rewardflow.colours import COLOURS, named_colours
from rewardflow.errors import ConfigErrors
from rewardflow.prompts import prompts_or_none
from rewards.base_config import RewardConfig


@dataclass
class ColorRewardConfig(RewardConfig):
    _target_: str = "rewards.color.ColorReward"
    name: str = "color"

    @classmethod
    def check(cls, cfg: Any, errors: ConfigErrors) -> None:
        super().check(cfg, errors)
        prompts = prompts_or_none(cfg.data) or []  # unreadable prompts: the data check reports them
        bad = [p for p in prompts if len(set(named_colours(p))) != 1]
        errors.require(
            not bad,
            "reward",
            f"reward=color needs every prompt to name exactly one colour of "
            f"{sorted(COLOURS)}; {len(bad)} do not, e.g. {bad[0] if bad else ''!r}. Fix: use data=demo "
            f"or a prompt file that names colours, or pick another reward",
        )


SCHEMAS = {"reward": {"color": ColorRewardConfig}}
