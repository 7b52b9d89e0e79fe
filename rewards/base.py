"""The reward interface.

A reward is an ``nn.Module`` mapping images in [0, 1] and their prompts to one score per image. It is frozen and
declares whether its score is differentiable in the image, which gradient-based methods (adjoint matching) require;
the composed config is checked against that declaration (:meth:`Reward.is_differentiable`) and against what the
reward needs (:meth:`Reward.check_config`: its prompts, its weights on disk) before any model is built.

Videos (B, F, 3, H, W) are scored frame by frame and reduced per video: ``mean`` over frames, or ``topk_mean``, the
mean of the best ``frame_topk_frac`` of frames (the Flash-GRPO recipe uses the top 30%).
"""
from __future__ import annotations

from typing import Iterable

import torch
from omegaconf import DictConfig
from torch import nn


class Reward(nn.Module):
    """Base class. Subclasses set ``differentiable`` and implement :meth:`score`."""

    #: whether ``score`` is differentiable with respect to the images (class attribute, read before building)
    differentiable: bool = False

    def __init__(self, name: str, frame_reduce: str = "mean", frame_topk_frac: float = 0.3):
        super().__init__()
        if frame_reduce not in FRAME_REDUCTIONS:
            raise ValueError(f"reward.frame_reduce must be one of {FRAME_REDUCTIONS} (got {frame_reduce!r})")
        self.name = name
        self.frame_reduce = frame_reduce
        self.frame_topk_frac = frame_topk_frac

    @classmethod
    def check_prompts(cls, prompts: list[str]) -> None:
        """Raise ``ValueError`` (naming the problem) if the reward cannot score these prompts."""

    @classmethod
    def check_config(cls, cfg: DictConfig, prompts: list[str], key: str = "reward") -> None:
        """Raise ``ValueError`` / :class:`launcher.errors.ConfigError` if this reward's config ``cfg`` (found at
        ``key``) cannot run with ``prompts``, e.g. its weights are missing offline. Called by config validation,
        before any model is built. The default checks the prompts only."""
        cls.check_prompts(prompts)

    @classmethod
    def is_differentiable(cls, cfg: DictConfig) -> bool:
        """Whether the reward built from ``cfg`` is differentiable (a class fact unless it depends on the config,
        as for a weighted sum of rewards)."""
        return cls.differentiable

    def score(self, images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        raise NotImplementedError

    def step_metrics(self) -> dict[str, float]:
        """Extra metrics of the last call, logged by the trainer each step (e.g. ``reward/<component>``)."""
        return {}

    def forward(self, images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        flat, flat_prompts, frames = self.flatten_frames(images, prompts)
        return self.reduce(self.score(flat, flat_prompts), frames)

    def score_chunks(self, chunks: Iterable[tuple[torch.Tensor, list[str]]]) -> torch.Tensor:
        """Scores of one batch that arrives in chunks (decoded a few images at a time, docs/memory.md): each chunk
        scored on its own. Rewards whose score depends on the whole batch (``reward=multi``'s normalisation)
        override it to give the scores one call over the batch would."""
        return torch.cat([self(images, prompts).float() for images, prompts in chunks])

    def flatten_frames(self, images: torch.Tensor, prompts: list[str]) -> tuple[torch.Tensor, list[str], int]:
        """Videos (B, F, 3, H, W) as B F frames with their prompts, and F (0 for images)."""
        if len(prompts) != images.shape[0]:
            raise ValueError(f"{self.name}: {images.shape[0]} images but {len(prompts)} prompts")
        if images.dim() == 5 and images.shape[2] == 3:
            f = images.shape[1]
            return images.flatten(0, 1), [p for p in prompts for _ in range(f)], f
        if images.dim() != 4 or images.shape[1] != 3:
            raise ValueError(f"{self.name}: expected images (B, 3, H, W) or videos (B, F, 3, H, W), "
                             f"got {tuple(images.shape)}")
        return images, prompts, 0

    def reduce(self, scores: torch.Tensor, frames: int) -> torch.Tensor:
        """Per-video scores from the per-frame ``scores`` of :meth:`flatten_frames` (images: unchanged)."""
        if not frames:
            return scores
        return reduce_frames(scores.view(-1, frames), self.frame_reduce, self.frame_topk_frac)


FRAME_REDUCTIONS = ("mean", "topk_mean")


def reduce_frames(scores: torch.Tensor, how: str = "mean", topk_frac: float = 0.3) -> torch.Tensor:
    """Per-video score from per-frame scores (B, F)."""
    if how == "mean":
        return scores.mean(1)
    k = max(1, int(round(topk_frac * scores.shape[1])))
    return scores.topk(k, dim=1).values.mean(1)
