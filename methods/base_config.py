"""The config fields every method shares; :meth:`methods.base.Method.check` checks them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from rewardflow.errors import ConfigErrors


@dataclass
class RecipeLR:
    """The learning rate of a method's recipe per fine-tuning mode (``model.finetune``); ``optimizer.lr`` is the one
    of the run's mode unless set (conf/train.yaml)."""

    lora: float = MISSING
    full: float = MISSING


@dataclass
class MethodConfig:
    """The shape of one training step. Each method's config sets its recipe's values (the CPU models' own budget,
    conf/budget/cpu_demo.yaml, scales them down for the CPU demo; experiment presets set paper scale)."""

    _target_: str = MISSING
    name: str = MISSING
    group_size: int = MISSING  # G generations (samples) per prompt
    prompts_per_step: int = MISSING  # prompts per step, global across ranks: B = prompts_per_step x group_size samples
    sampling_steps: int = MISSING  # N steps of the sampler's time grid
    updates_per_rollout: int = 1  # optimizer steps per rollout: the B samples are split into this many updates
    update_batch: int = 8  # transformer rows per call of the update, CFG rows counted: the memory bound
    # (docs/performance.md#batched-trained-steps; the gradient does not depend on it)
    rollout_chunk: int = 32  # rows per transformer call without gradients (CFG rows counted; docs/memory.md)
    decode_chunk: int = 8  # images per VAE decode and per reward call
    trajectory_offload: bool = False  # keep the states the update reads in pinned host memory, not on the GPU
    shuffle_samples: bool = False  # shuffle the samples before splitting them into updates (Flow-GRPO)
    recipe_lr: RecipeLR = field(default_factory=RecipeLR)  # optimizer.lr per model.finetune (each method's source)

    @classmethod
    def check(cls, cfg: Any, errors: ConfigErrors) -> None:
        """The config-check hook every component has (run by ``launcher.validate`` before anything is built):
        record in ``errors`` what this method cannot run with. ``cfg`` is the whole run config (typed; this method's
        is ``cfg.method``). Subclasses add their rules after ``super().check(cfg, errors)``."""
        m = cfg.method
        for key in ("group_size", "prompts_per_step"):
            errors.require(getattr(m, key) >= 1, f"method.{key}", f"must be >= 1 (got {getattr(m, key)})")
        errors.require(
            m.update_batch >= 1,
            "method.update_batch",
            f"must be >= 1 (got {m.update_batch}): transformer "
            f"rows per call of the update, CFG rows counted (docs/performance.md#batched-trained-steps)",
        )
        errors.require(m.sampling_steps >= 2, "method.sampling_steps", f"must be >= 2 (got {m.sampling_steps})")
        errors.require(
            m.rollout_chunk >= 1,
            "method.rollout_chunk",
            f"must be >= 1 row (got {m.rollout_chunk}); a sample with true CFG is 2 rows and is never split",
        )
        errors.require(m.decode_chunk >= 1, "method.decode_chunk", f"must be >= 1 image (got {m.decode_chunk})")
        n = m.group_size * m.prompts_per_step
        errors.require(
            m.updates_per_rollout >= 1 and n % m.updates_per_rollout == 0,
            "method.updates_per_rollout",
            f"must divide the {n} samples per step (group_size x prompts_per_step); got {m.updates_per_rollout}",
        )
