"""Sigma schedules for rectified-flow sampling (docs/methods/grpo_baselines.md#sigma-schedules).

Time runs from noise (sigma = 1) to data (sigma = 0); ``x_sigma = (1 - sigma) x0 + sigma eps``.
Two schedules exist in the baselines and both are kept on purpose:

* ``linear_shift`` (DanceGRPO, every model): ``s_i = 1 - i/N`` then the SD3 time shift.
* ``scheduler`` (Flow-GRPO): the model family's diffusers scheduler, set up as the family's pipeline does; the
  backbone owns that grid (:meth:`models.backbone.Backbone.sigmas`, :mod:`models.sigma_grids`).
"""

from __future__ import annotations

import torch

from methods.schedule_config import Schedule
from models.backbone import Backbone


def time_shift(s: torch.Tensor, shift: float) -> torch.Tensor:
    """SD3 time shift ``S s / (1 + (S - 1) s)``; S > 1 spends more steps at high noise."""
    return shift * s / (1.0 + (shift - 1.0) * s)


def linear_shift_sigmas(num_steps: int, shift: float) -> torch.Tensor:
    """DanceGRPO schedule: N + 1 float64 sigmas from exactly 1 down to exactly 0."""
    s = 1.0 - torch.arange(num_steps + 1, dtype=torch.float64) / num_steps
    return time_shift(s, shift)


def make_sigmas(kind: str, num_steps: int, shift: float, backbone: Backbone) -> torch.Tensor:
    """The N + 1 float64 sigmas of ``method.schedule=<kind>``: DanceGRPO's grid, or the model family's own."""
    if kind == Schedule.linear_shift:
        return linear_shift_sigmas(num_steps, shift)
    if kind == Schedule.scheduler:
        return backbone.sigmas(num_steps, shift)
    raise ValueError(f"unknown sigma schedule {kind!r}; expected one of {', '.join(Schedule)}")


def quantize_model_time(sigma: torch.Tensor) -> torch.Tensor:
    """DanceGRPO feeds the transformer floor(1000 sigma) / 1000; the SDE itself uses exact sigma."""
    return torch.floor(sigma * 1000.0) / 1000.0
