"""The method interface: what one trainer loop needs from any reward fine-tuning method.

The loop in :mod:`launcher.train.trainer` runs, for every step::

    rollout = method.rollout(prompts, generator)        # sample, no grad        (time/rollout_s)
    method.score(rollout, reward)                       # rewards                 (time/reward_s)
    method.prepare_update(rollout)                      # advantages / targets    (time/update_s ...)
    for u, update in enumerate(method.update_plan(rollout, gen)):  # one optimizer step per update
        method.on_update_start(u)                       # u = 0: no optimizer step since the rollout yet
        for chunk in update:                            # the built-in methods: one chunk per update
            method.backward(rollout, chunk, n)          # forward + backward, grads accumulate
        clip, step (or skip), zero_grad                 # one host sync per update (launcher/train/update_loop.py)
    method.end_step(step)                               # after the updates (e.g. move a lagging sampling policy)
    log(method.step_metrics(), reward.step_metrics())   # optional extra metrics

Checkpoints hold the trained weights, the optimizer and ``method.state_dict()``.

A method never copies the loop; it only fills these hooks.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import torch

from methods.base_config import MethodConfig
from methods.chunking import score_in_chunks
from models.backbone import Backbone, PromptEmbeds
from rewardflow.distributed import current_world


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


#: the config class of a method: :class:`Method` and its subclasses are generic over it
ConfigT = TypeVar("ConfigT", bound=MethodConfig)


class Method(abc.ABC, Generic[ConfigT]):
    """Base class of all methods. The trainer builds one from its typed config: ``MethodCls(cfg, backbone)``.

    A method is generic over its config class, ``class MyMethod(Method[MyMethodConfig])``: ``self.cfg`` and the
    classmethods that read a config (``needs_reference``, ``passes_per_sample``, ``trained_per_sample``; only ever
    called on a class with its own config, the ``_target_`` of that config) are typed with it. A method other methods
    derive from with their own configs stays generic, ``class GRPO(Method[GRPOConfigT])`` with a type variable bound
    to its config class, and each subclass names its own (``class FlashGRPO(GRPO[FlashGRPOConfig])``)."""

    #: the method needs ``d reward / d image`` (adjoint methods); checked against the reward before building
    requires_differentiable_reward: bool = False

    cfg: ConfigT

    def __init__(self, cfg: ConfigT, backbone: Backbone):
        self.cfg = cfg
        self.backbone = backbone
        self.world = current_world()  # this process's rank; collectives degrade to identity in one process
        # ``score`` keeps 8-bit host copies of the images only while this is set: the trainer clears it on steps that
        # draw no image grid (trainer.sample_every), so a step's host memory does not grow with its batch by them
        self.keep_images = True

    # -- config ---------------------------------------------------------------------------------------------------
    @classmethod
    def needs_reference(cls, cfg: ConfigT) -> bool:
        """Whether the backbone must keep the frozen pretrained policy (KL, adjoint methods)."""
        return False

    @classmethod
    def passes_per_sample(cls, cfg: ConfigT) -> tuple[int, int]:
        """Transformer ``(forward, backward)`` evaluations per sample in one step of this method with ``cfg``, as the
        trainer counts them on the model (``count/transformer_fwd``, ``count/transformer_bwd``; true CFG doubles
        both). A method declares it so that a test checks the counted passes against it, for any config."""
        raise NotImplementedError(f"{cls.__name__} does not declare its transformer passes per sample")

    @property
    def samples_per_step(self) -> int:
        return int(self.cfg.prompts_per_step) * int(self.cfg.group_size)

    # -- the loop's hooks -----------------------------------------------------------------------------------------
    @abc.abstractmethod
    def rollout(self, prompts: list[str], generator: torch.Generator) -> Rollout:
        """Sample ``group_size`` generations of each of this rank's prompts, without gradients. Group keys must be
        unique across ranks (e.g. offset by ``self.world.rank``)."""

    def score(self, rollout: Rollout, reward: torch.nn.Module) -> torch.Tensor:
        """Raw rewards (B,) of the rollout, stored on it. A rollout that left decoding to this phase
        (``decode_latents``) is decoded and scored ``method.decode_chunk`` images at a time, keeping 8-bit copies for
        the image grids only while ``keep_images`` (methods/chunking.py); otherwise its ``images`` are scored."""
        if rollout.decode_latents is not None:
            rollout.rewards, rollout.images = score_in_chunks(
                self.backbone,
                reward,
                rollout.decode_latents,
                rollout.prompts,
                int(self.cfg.decode_chunk),
                keep_images=self.keep_images,
            )
            return rollout.rewards
        with torch.no_grad():
            rollout.rewards = reward(rollout.images, rollout.prompts).float()
        return rollout.rewards

    def prepare_update(self, rollout: Rollout) -> dict[str, float]:
        """Anything computed once per rollout before the updates (e.g. advantages); returns metrics."""
        return {}

    def update_plan(self, rollout: Rollout, generator: torch.Generator) -> list[list[torch.Tensor]]:
        """Sample indices grouped as ``[update][chunk] -> LongTensor`` (host tensors, pinned on CUDA so that
        ``backward`` moves them with ``non_blocking``, no sync: docs/performance.md#one-host-sync-per-update); one
        optimizer step per
        update. Default: the samples (shuffled with ``method.shuffle_samples``) in ``updates_per_rollout`` equal
        updates, each one chunk: ``backward`` packs a chunk's trained rows into transformer calls of
        ``method.update_batch`` rows (methods/update_rows.py)."""
        b = len(rollout)
        order = torch.randperm(b, generator=generator) if self.cfg.shuffle_samples else torch.arange(b)
        if self.backbone.device.type == "cuda":
            order = order.pin_memory()
        per_update = b // int(self.cfg.updates_per_rollout)
        return [[order[u : u + per_update]] for u in range(0, b, per_update)]

    def on_update_start(self, index: int) -> None:
        """Called before the ``index``-th update of a rollout (0: the first, before any optimizer step on it)."""

    def end_step(self, step: int) -> None:
        """Called once per step after all of its updates, skipped or not (DiffusionNFT moves its sampling policy)."""

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Tensors besides the trained weights that a resumed run needs (e.g. a lagging copy of the weights).
        Checkpoints save them, and resuming loads them back into these very tensors, in place."""
        return {}

    def step_metrics(self) -> dict[str, float]:
        """Extra metrics of the step just run (after its updates), logged as they are (e.g. diagnostics)."""
        return {}

    @abc.abstractmethod
    def backward(self, rollout: Rollout, samples: torch.Tensor, update_size: int) -> dict[str, torch.Tensor]:
        """Forward + backward of the loss of ``samples`` (gradients accumulate), normalised so the whole update's
        gradient is the mean over its ``update_size`` samples. Returns per-sample sums of statistics as device
        tensors (nothing read back to the host; a non-finite ``loss`` skips the update; launcher/train/update_loop.py)."""
