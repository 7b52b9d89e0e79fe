"""The reward interface.

A reward is an ``nn.Module`` mapping images in [0, 1] and their prompts to one score per image. It is frozen and
declares whether its score is differentiable in the image, which gradient-based methods (adjoint matching) require;
the composed config is checked against that declaration before any model is built.
"""
from __future__ import annotations

import torch
from torch import nn


class Reward(nn.Module):
    """Base class. Subclasses set ``differentiable`` and implement :meth:`score`."""

    #: whether ``score`` is differentiable with respect to the images (class attribute, read before building)
    differentiable: bool = False

    def __init__(self, name: str):
        super().__init__()
        self.name = name

    @classmethod
    def check_prompts(cls, prompts: list[str]) -> None:
        """Raise ``ValueError`` (naming the problem) if the reward cannot score these prompts."""

    def score(self, images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        if images.dim() != 4 or images.shape[1] != 3:
            raise ValueError(f"{self.name}: expected images (B, 3, H, W), got {tuple(images.shape)}")
        if len(prompts) != images.shape[0]:
            raise ValueError(f"{self.name}: {images.shape[0]} images but {len(prompts)} prompts")
        return self.score(images, prompts)
