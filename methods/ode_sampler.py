"""Deterministic Euler sampler in AM time, for EAM's few-step endpoint (docs/methods/eam.md#one-iteration-side-by-side).

``x_{i+1} = x_i + (t_{i+1} - t_i) v(x_i, t_i)`` on an increasing AM-time grid; with ``t = 1 - sigma`` this is
exactly diffusers' ``FlowMatchEulerDiscreteScheduler`` step on the sigma grid (time shift included).
"""

from __future__ import annotations

from typing import Callable

import torch

from methods.schedule import make_sigmas
from models.backbone import Backbone


def am_time_grid(schedule: str, num_steps: int, shift: float, backbone: Backbone) -> torch.Tensor:
    """Increasing AM times ``1 - sigma`` (float64, N + 1 points ending at 1) of a sigma schedule of
    :mod:`methods.schedule` (``linear_shift`` or the family's diffusers ``scheduler``)."""
    return 1.0 - make_sigmas(schedule, num_steps, shift, backbone)


def euler_ode(
    velocity: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], x: torch.Tensor, ts: torch.Tensor
) -> torch.Tensor:
    """Integrate ``dx/dt = velocity(x, t)`` (``t`` passed per sample, (B,) float64) over the grid ``ts``."""
    b = x.shape[0]
    # the grid on the device once (a per-call move of a host value is a sync on CUDA), its steps as host floats
    on_device, steps = ts.to(x.device), (ts[1:] - ts[:-1]).tolist()
    for i, h in enumerate(steps):
        t = on_device[i].expand(b)
        x = x + h * velocity(x, t).to(x.dtype)
    return x
