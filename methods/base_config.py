"""The config fields every method shares; :meth:`methods.base.Method.check` checks them."""

from __future__ import annotations

from dataclasses import dataclass, field

from omegaconf import MISSING


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
