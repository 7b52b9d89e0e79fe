"""Brightness: the mean luminance of an image, a weighted sum of its channels (ITU-R BT.601 luma by default), in
[0, 1]. Differentiable and prompt-free; docs/extending.md walks through it as the example of adding a reward."""

from __future__ import annotations

import torch

from rewards.base import Reward
from rewards.brightness_config import BrightnessRewardConfig


class BrightnessReward(Reward[BrightnessRewardConfig]):
    differentiable = True

    def __init__(self, cfg: BrightnessRewardConfig):
        super().__init__(cfg)
        self.register_buffer("_weights", torch.tensor(cfg.channel_weights), persistent=False)

    def score(self, images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        luma = (images * self._weights.to(images.device, images.dtype)[None, :, None, None]).sum(1)
        return luma.mean((1, 2))
