"""The reward interface.

A reward is an ``nn.Module`` mapping images in [0, 1] and their prompts to one score per image, built from its typed
config (``RewardCls(cfg)``). It is frozen and declares whether its score is differentiable in the image, which
gradient-based methods (adjoint matching) require; the composed config is checked against that declaration
(:meth:`Reward.is_differentiable`) and against what the reward needs (its ``check`` hook: its prompts, its weights on
disk) before any model is built.

Videos (B, F, 3, H, W) are scored frame by frame and reduced per video: ``mean`` over frames, or ``topk_mean``, the
mean of the best ``frame_topk_frac`` of frames (the Flash-GRPO recipe uses the top 30%).
"""

from __future__ import annotations

from typing import Any, Generic, Iterable, TypeVar

import torch
from torch import nn

from rewardflow.errors import ConfigErrors
from rewards.base_config import FrameReduce, RewardConfig

#: the config class of a reward: :class:`Reward` and its subclasses are generic over it
RewardConfigT = TypeVar("RewardConfigT", bound=RewardConfig)


class Reward(nn.Module, Generic[RewardConfigT]):
    """Base class. Subclasses set ``differentiable`` and implement :meth:`score`. A reward is generic over its config
    class, ``class MyReward(Reward[MyRewardConfig])``, which types ``self.cfg`` and the classmethods that read a
    config (:meth:`is_differentiable`, only ever asked about the reward's own config)."""

    #: whether ``score`` is differentiable with respect to the images (class attribute, read before building)
    differentiable: bool = False
    #: a metric of a prompt's samples together (diversity), scored only by the held-out evaluation: its
    #: :meth:`evaluate` gives per-sample values that :meth:`prompt_scores` reduces to one per prompt
    per_prompt: bool = False

    cfg: RewardConfigT

    def __init__(self, cfg: RewardConfigT):
        super().__init__()
        self.cfg = cfg
        self.name = cfg.name
        self.frame_reduce = cfg.frame_reduce
        self.frame_topk_frac = cfg.frame_topk_frac

    @classmethod
    def check_with_code(cls, cfg: Any, errors: ConfigErrors) -> None:
        """The config-check hook for what needs this reward's code (run by ``launcher.validate`` before anything is
        built, after the config class's ``check``, which holds the rules on values and files). ``cfg`` is the whole
        run config (typed; the reward's is ``cfg.reward``); a reward's hook calls this first."""

    @classmethod
    def is_differentiable(cls, cfg: RewardConfigT) -> bool:
        """Whether the reward built from ``cfg`` is differentiable (a class fact unless it depends on the config,
        as for a weighted sum of rewards)."""
        return cls.differentiable

    def score(self, images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        raise NotImplementedError

    def step_metrics(self) -> dict[str, float]:
        """Extra metrics of the last call, logged by the trainer each step (e.g. ``reward/<component>``)."""
        return {}

    @torch.no_grad()
    def evaluate(self, images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        """Scores for the held-out evaluation (docs/evaluation.md), without gradients and without touching any
        state that training reads (running statistics, :meth:`step_metrics`). The default is :meth:`forward`;
        rewards that keep such state override it."""
        return self(images, prompts)

    def prompt_scores(self, values: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        """For a ``per_prompt`` metric: one score per distinct prompt (in order of first appearance) from the
        :meth:`evaluate` values of all its samples (gathered from every rank), ``prompts[k]`` being sample k's."""
        raise NotImplementedError

    def forward(self, images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        return self.per_image(self.score, images, prompts)

    def per_image(self, score, images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        """``score(images, prompts)`` of images, or of every frame of videos reduced per video."""
        flat, flat_prompts, frames = self.flatten_frames(images, prompts)
        return self.reduce(score(flat, flat_prompts), frames)

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
            raise ValueError(
                f"{self.name}: expected images (B, 3, H, W) or videos (B, F, 3, H, W), got {tuple(images.shape)}"
            )
        return images, prompts, 0

    def reduce(self, scores: torch.Tensor, frames: int) -> torch.Tensor:
        """Per-video scores from the per-frame ``scores`` of :meth:`flatten_frames` (images: unchanged)."""
        if not frames:
            return scores
        return reduce_frames(scores.view(-1, frames), self.frame_reduce, self.frame_topk_frac)


def reduce_frames(scores: torch.Tensor, how: str = "mean", topk_frac: float = 0.3) -> torch.Tensor:
    """Per-video score from per-frame scores (B, F)."""
    if how == FrameReduce.mean:
        return scores.mean(1)
    k = max(1, int(round(topk_frac * scores.shape[1])))
    return scores.topk(k, dim=1).values.mean(1)
