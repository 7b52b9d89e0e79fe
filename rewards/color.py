"""Prompt-conditioned colour reward: how strongly the image shows the colour its prompt names.

Cheap, differentiable and needs no download, so the CPU demo can show learning. A prompt must name exactly one of
:data:`COLOURS` (checked up front). Score = ``1 - mean_pixels ||pixel - target||^2 / 3`` in [0, 1].
"""

from __future__ import annotations

import torch

from rewardflow.colours import COLOURS, named_colours  # the shared table; rewards.color.COLOURS stays importable
from rewards.base import Reward
from rewards.color_config import ColorRewardConfig


class ColorReward(Reward[ColorRewardConfig]):
    differentiable = True

    def __init__(self, cfg: ColorRewardConfig):
        super().__init__(cfg)
        self.register_buffer("_table", torch.tensor(list(COLOURS.values())), persistent=False)
        self._index = {c: i for i, c in enumerate(COLOURS)}

    def score(self, images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        idx = torch.tensor([self._index[named_colours(p)[0]] for p in prompts], device=images.device)
        target = self._table.to(images.device, images.dtype)[idx][:, :, None, None]
        return 1.0 - ((images - target) ** 2).sum(1).mean((1, 2)) / 3.0
