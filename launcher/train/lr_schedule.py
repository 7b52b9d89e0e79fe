"""The optimizer and its learning-rate schedule (``optimizer.*``; docs/evaluation.md#learning-rate-schedules).

The schedule advances once per trainer step (after the step's updates), so ``optimizer.warmup_steps`` and the
cosine's length count trainer steps whatever the number of optimizer updates per step, and a step's updates share
one learning rate (the ``lr`` metric). Schedules are torch's own, so their state goes into the DCP checkpoint and a
resumed run continues the same curve:

- ``constant``: ``optimizer.lr`` throughout (the baselines' recipes: DanceGRPO, Flow-GRPO, Flash-GRPO).
- ``warmup_constant``: step ``s < N`` uses ``lr (s + 1) / (N + 1)``, then ``lr`` (``LinearLR``).
- ``warmup_cosine``: the same warmup, then a cosine from ``lr`` down to 0 over the remaining steps
  (``LinearLR`` then ``CosineAnnealingLR``, chained by ``SequentialLR``).
"""

from __future__ import annotations

from typing import Any

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from torch.optim.lr_scheduler import ConstantLR, CosineAnnealingLR, LinearLR, LRScheduler, SequentialLR

from launcher.train.trainer_config import LRSchedule

#: keys of ``optimizer`` that are not the optimizer constructor's: the schedule's, and the rate's multiplier
SCHEDULE_KEYS = ("scheduler", "warmup_steps", "lr_scale")


def base_lr(cfg: Any) -> float:
    """The rate the optimizer is built with: ``optimizer.lr x optimizer.lr_scale`` (the protocol's grid multiplies
    every method's own rate; docs/comparing.md#comparison-protocol)."""
    return float(cfg.lr) * float(cfg.lr_scale)


def build_optimizer(cfg: DictConfig, params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    """``optimizer`` (a Hydra partial, e.g. AdamW) over ``params`` at :func:`base_lr`, without the schedule keys."""
    keys = [str(k) for k in cfg.keys() if k not in SCHEDULE_KEYS]
    return instantiate(OmegaConf.masked_copy(cfg, keys))(params, lr=base_lr(cfg))


def build_lr_schedule(optimizer: torch.optim.Optimizer, cfg: DictConfig, steps: int) -> LRScheduler:
    """The torch scheduler of ``optimizer.scheduler`` for a run of ``steps`` trainer steps."""
    name, warmup = LRSchedule(cfg.scheduler), int(cfg.warmup_steps)
    if name == LRSchedule.constant:
        return ConstantLR(optimizer, factor=1.0, total_iters=0)
    ramp = LinearLR(optimizer, start_factor=1.0 / (warmup + 1), end_factor=1.0, total_iters=warmup)
    if name == LRSchedule.warmup_constant:
        return ramp
    cosine = CosineAnnealingLR(optimizer, T_max=steps - warmup, eta_min=0.0)
    return SequentialLR(optimizer, [ramp, cosine], milestones=[warmup])


def rebase(optimizer: torch.optim.Optimizer, schedule: LRScheduler, cfg: DictConfig) -> None:
    """After loading another run's checkpoint (``trainer.resume_from``): this run's ``optimizer.lr`` and other
    hyperparameters replace the ones the checkpoint's optimizer and schedule state brought back, at the same point of
    the schedule (every schedule here is proportional to the base rate, so the rates are scaled by new / old)."""
    new_lr = base_lr(cfg)
    for group in optimizer.param_groups:
        old = float(group.get("initial_lr", group["lr"]))
        group["lr"] = group["lr"] * new_lr / old if old else new_lr
        group["initial_lr"] = new_lr
        for key in ("betas", "eps", "weight_decay"):
            if key in cfg and key in group:
                group[key] = tuple(cfg[key]) if key == "betas" else float(cfg[key])
    for sched in [schedule, *getattr(schedule, "_schedulers", [])]:
        sched.base_lrs = [new_lr for _ in optimizer.param_groups]
        if hasattr(sched, "_last_lr"):
            sched._last_lr = [group["lr"] for group in optimizer.param_groups]
