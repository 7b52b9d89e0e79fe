"""Configs of the trainer loop (``trainer.*``) and of its optimizer (``optimizer.*``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Optional

from omegaconf import II


class MemoryCheck(StrEnum):
    """What a GPU run does when its memory plan does not fit the GPU (docs/memory.md#the-check-at-start)."""

    error = "error"  # stop with the plan's fixes before any weight is read
    warn = "warn"  # log the plan and a warning, and start anyway (the plan may be pessimistic for this run)
    off = "off"  # neither check nor log the fit (the auto settings are still decided from the plan)


class ObjectiveDirection(StrEnum):
    """Whether a sweeper should maximize or minimize ``trainer.objective`` (docs/tuning.md#the-objective)."""

    maximize = "maximize"
    minimize = "minimize"


@dataclass
class TrainerConfig:
    steps: int = 150  # rollout/update iterations (the CPU demo: ~1-2 min on 2 cores)
    seed: int = 0  # 0 <= seed < 2**63; any such seed works
    max_grad_norm: float = 1.0  # 0 disables clipping
    sample_every: int = 25  # image grid every N steps (W&B and PNG); 0 disables
    num_sample_images: int = 8  # images per grid: >= 1 while sample_every > 0
    max_nonfinite_in_a_row: int = 3  # abort after this many consecutive skipped (NaN/Inf) or exploded steps
    max_weight_growth: float = 100.0  # a step whose weights' norm exceeds this x its start value exploded; 0: off
    threads: int = 0  # torch CPU threads per process, >= 0; 0 = auto: SLURM cpus, else cores / local processes
    progress: bool = True  # progress bar with reward and s/step (drawn on a terminal only)
    log_every: int = 10  # a plain log line every N steps (console and run log); 0: off
    ckpt_every: int = 50  # DCP checkpoint every N steps, >= 0 (0: only on preemption / at the end)
    async_checkpoint: bool = False  # write checkpoints in the background (docs/performance.md#asynchronous-checkpoints)
    keep_last_ckpts: int = 2  # complete checkpoints kept, >= 1 (older ones are deleted)
    checkpoint_checksums: bool = True  # every checkpoint file's sha256 in meta.json, verified on resume
    resume: bool = True  # resume from the run dir's latest complete checkpoint if there is one
    resume_from: Optional[str] = None  # else start from another run's dir (its newest checkpoint) or checkpoint folder
    export: bool = True  # at the end, write <run_dir>/export/ in the format diffusers / peft load
    ema_decay: float = 0.0  # EMA of the trainable weights, every optimizer step; 0 = off (DanceGRPO: 0.995)
    export_ema: bool = False  # export the EMA weights instead of the trained ones (needs ema_decay > 0)
    ema_warmup: bool = False  # ramp the decay in: min((1 + s) / (10 + s), ema_decay) at the s-th update, as
    # flow_grpo/ema.py (DiffusionNFT's EMA; launcher/train/ema.py)
    memory_check: MemoryCheck = MemoryCheck.error  # a GPU run whose planned peak does not fit: error | warn | off
    # the logged metric whose last value the run returns to a sweeper (Optuna, ...): by default the final held-out
    # evaluation's score of the trained reward (docs/tuning.md#the-objective); e.g. reward/mean for the last step's
    objective: str = "eval/${reward.name}/mean"
    objective_direction: ObjectiveDirection = ObjectiveDirection.maximize  # what a sweeper should do with it


class LRSchedule(StrEnum):
    """Learning rate per trainer step (launcher/train/lr_schedule.py)."""

    constant = "constant"  # optimizer.lr throughout (the baselines' recipes)
    warmup_constant = "warmup_constant"  # linear warmup over optimizer.warmup_steps, then optimizer.lr
    warmup_cosine = "warmup_cosine"  # the same warmup, then a cosine down to 0 at the last step


@dataclass
class OptimizerConfig:
    _target_: str = "torch.optim.AdamW"
    _partial_: bool = True
    # finite, > 0; default: the method's recipe rate for the run's fine-tuning mode (method.recipe_lr)
    lr: float = II("method.recipe_lr.${model.finetune}")
    # the rate used is lr x lr_scale: a sweep of lr_scale is the same grid around every method's own lr
    # (docs/comparing.md#comparison-protocol); finite, > 0
    lr_scale: float = 1.0
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])  # two, each in [0, 1)
    weight_decay: float = 1e-4  # finite, >= 0 (0: none)
    eps: float = 1e-8  # finite, > 0
    scheduler: LRSchedule = LRSchedule.constant
    warmup_steps: int = 0  # warmup_*: lr ramps linearly over the first N trainer steps (N >= 1)
