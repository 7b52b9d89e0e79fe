"""Brightness: the mean luminance of an image, a weighted sum of its channels (ITU-R BT.601 luma by default), in
[0, 1]. Differentiable and prompt-free; docs/extending.md walks through it as the example of adding a reward."""

from __future__ import annotations

from typing import Any

import torch

from rewardflow.errors import ConfigErrors
from rewards.base import Reward
from rewards.brightness_config import BrightnessRewardConfig


class BrightnessReward(Reward[BrightnessRewardConfig]):
    differentiable = True

    def __init__(self, cfg: BrightnessRewardConfig):
        super().__init__(cfg)
        self.register_buffer("_weights", torch.tensor(cfg.channel_weights), persistent=False)

    @classmethod
    def check_with_code(cls, cfg: Any, errors: ConfigErrors) -> None:
        super().check_with_code(cfg, errors)
        w = list(cfg.reward.channel_weights)
        errors.require(
            len(w) == 3 and min(w) >= 0 and abs(sum(w) - 1) < 1e-6,
            "reward.channel_weights",
            f"must be 3 non-negative weights (R, G, B) summing to 1 (got {w}). Fix: "
            f"reward.channel_weights=[0.299,0.587,0.114]",
        )

    def score(self, images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        luma = (images * self._weights.to(images.device, images.dtype)[None, :, None, None]).sum(1)
        return luma.mean((1, 2))
