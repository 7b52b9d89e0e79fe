"""Prompt-conditioned colour reward: how strongly the image shows the colour its prompt names.

Cheap, differentiable and needs no download, so the CPU demo can show learning. A prompt must name exactly one of
:data:`COLOURS` (checked up front). Score = ``1 - mean_pixels ||pixel - target||^2 / 3`` in [0, 1].
"""

from __future__ import annotations

import re
from typing import Any

import torch

from rewardflow.colours import COLOURS  # the shared table; rewards.color.COLOURS stays importable
from rewardflow.errors import ConfigErrors
from rewardflow.prompts import prompts_or_none
from rewards.base import Reward
from rewards.color_config import ColorRewardConfig

_WORD = re.compile(r"[a-z]+")


def named_colours(prompt: str) -> list[str]:
    return [w for w in _WORD.findall(prompt.lower()) if w in COLOURS]


class ColorReward(Reward[ColorRewardConfig]):
    differentiable = True

    def __init__(self, cfg: ColorRewardConfig):
        super().__init__(cfg)
        self.register_buffer("_table", torch.tensor(list(COLOURS.values())), persistent=False)
        self._index = {c: i for i, c in enumerate(COLOURS)}

    @classmethod
    def check_with_code(cls, cfg: Any, errors: ConfigErrors) -> None:
        super().check_with_code(cfg, errors)
        prompts = prompts_or_none(cfg.data) or []  # unreadable prompts: the data check reports them
        bad = [p for p in prompts if len(set(named_colours(p))) != 1]
        errors.require(
            not bad,
            "reward",
            f"reward=color needs every prompt to name exactly one colour of "
            f"{sorted(COLOURS)}; {len(bad)} do not, e.g. {bad[0] if bad else ''!r}. Fix: use data=demo "
            f"or a prompt file that names colours, or pick another reward",
        )

    def score(self, images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        idx = torch.tensor([self._index[named_colours(p)[0]] for p in prompts], device=images.device)
        target = self._table.to(images.device, images.dtype)[idx][:, :, None, None]
        return 1.0 - ((images - target) ** 2).sum(1).mean((1, 2)) / 3.0
