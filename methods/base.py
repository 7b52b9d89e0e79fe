"""The method interface: what one trainer loop needs from any reward fine-tuning method.

The loop in :mod:`launcher.trainer` runs, for every step::

    rollout = method.rollout(prompts, generator)        # sample, no grad        (time/rollout_s)
    method.score(rollout, reward)                       # rewards                 (time/reward_s)
    method.prepare_update(rollout)                      # advantages / targets    (time/update_s ...)
    for update in method.update_plan(rollout, gen):     # ... one optimizer step per update
        for micro_batch in update:
            method.backward(rollout, micro_batch, n)    # forward + backward, grads accumulate
        clip, step, zero_grad
    log(method.step_metrics(), reward.step_metrics())   # optional extra metrics

A method never copies the loop; it only fills these hooks.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any

import torch
from omegaconf import DictConfig

from launcher.distributed import current_world
from models.backbone import Backbone, PromptEmbeds


@dataclass
class Rollout:
    """What sampling stores for training (one entry per sample; B = prompts x group size).

    Args:
        prompts: the prompt of each sample.
        group_keys: the group each sample belongs to (prompt index within the step).
        embeds: text conditioning per sample.
        images: decoded images (B, 3, H, W) in [0, 1], or 8-bit host copies kept for the image grids once
            ``score`` has decoded and scored them chunk by chunk (methods/chunking.py).
        latents: trajectory states ``x_0..x_N`` (B, N + 1, *latent) in fp32 (a tensor or a
            :class:`methods.trajectory.Trajectory` holding only the states the update reads), or what the method needs.
        decode_latents: the latents ``score`` decodes (B, *latent), when the rollout leaves decoding to it.
        log_probs: rollout log-probs of each transition (B, N); NaN where the step was deterministic.
        train_steps: per-sample transition indices to train (B, T).
        rewards, advantages: filled by ``score`` and ``prepare_update``.
        extras: method-specific tensors.
    """

    prompts: list[str]
    group_keys: list[Any]
    embeds: PromptEmbeds
    images: torch.Tensor | None
    latents: Any = None
    log_probs: torch.Tensor | None = None
    train_steps: torch.Tensor | None = None
    rewards: torch.Tensor | None = None
    advantages: torch.Tensor | None = None
    extras: dict[str, Any] = field(default_factory=dict)
    decode_latents: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.prompts)


class Method(abc.ABC):
    """Base class of all methods. Subclasses are built from their typed config by the trainer."""

    #: the method needs ``d reward / d image`` (adjoint methods); checked against the reward before building
    requires_differentiable_reward: bool = False

    def __init__(self, cfg: DictConfig, backbone: Backbone):
        self.cfg = cfg
        self.backbone = backbone
        self.world = current_world()       # this process's rank; collectives degrade to identity in one process

    # -- config ---------------------------------------------------------------------------------------------------
    @classmethod
    def check_config(cls, cfg: DictConfig) -> None:
        """Raise :class:`launcher.errors.ConfigError` for values this method cannot run (called before building)."""

    @classmethod
    def needs_reference(cls, method_cfg: DictConfig) -> bool:
        """Whether the backbone must keep the frozen pretrained policy (KL, adjoint methods)."""
        return False

    @property
    def samples_per_step(self) -> int:
        return int(self.cfg.prompts_per_step) * int(self.cfg.group_size)

    # -- the loop's hooks -----------------------------------------------------------------------------------------
    @abc.abstractmethod
    def rollout(self, prompts: list[str], generator: torch.Generator) -> Rollout:
        """Sample ``group_size`` generations of each of this rank's prompts, without gradients. Group keys must be
        unique across ranks (e.g. offset by ``self.world.rank``)."""

    def score(self, rollout: Rollout, reward: torch.nn.Module) -> torch.Tensor:
        """Raw rewards (B,) of the rollout's images; stored on the rollout."""
        with torch.no_grad():
            rollout.rewards = reward(rollout.images, rollout.prompts).float()
        return rollout.rewards

    def prepare_update(self, rollout: Rollout) -> dict[str, float]:
        """Anything computed once per rollout before the updates (e.g. advantages); returns metrics."""
        return {}

    @abc.abstractmethod
    def update_plan(self, rollout: Rollout, generator: torch.Generator) -> list[list[torch.Tensor]]:
        """Sample indices grouped as ``[update][micro_batch] -> LongTensor``; one optimizer step per update."""

    def step_metrics(self) -> dict[str, float]:
        """Extra metrics of the step just run (after its updates), logged as they are (e.g. diagnostics)."""
        return {}

    @abc.abstractmethod
    def backward(self, rollout: Rollout, samples: torch.Tensor, update_size: int) -> dict[str, float]:
        """Forward + backward of the loss of ``samples`` (gradients accumulate), normalised so the whole update's
        gradient is the mean over its ``update_size`` samples. Returns sums of statistics (see ``launcher.trainer``)."""
