"""Which grid times an AWM sample trains: T stratified draws over the rollout grid's indices (arXiv:2509.25050;
the authors' discrete ``time_type`` branches, scxue/advantage_weighted_matching @be51372
``scripts/train_sd3_awm.py`` lines 1172-1205; docs/methods/awm.md#trained-times).

The indices below ``top = int(N x fraction)`` are cut into T slices at ``linspace(start, top, T + 1)`` (float32,
truncated to integers as theirs) and one index is drawn uniformly in each slice: ``lower + int(u (upper - lower))``
with ``u`` in [0, 1). ``discrete`` starts at 0, ``discrete_wo_init`` at 1 (index 0 is sigma = 1, pure noise);
``discrete_with_init`` always trains index 0 and draws the other T - 1 from slices of [1, top]. A slice narrower
than one index gives its lower bound, so small grids train some times twice."""

from __future__ import annotations

import torch

from methods.awm_config import TimeSampling


def _slices(u: torch.Tensor, start: int, top: int) -> torch.Tensor:
    boundaries = torch.linspace(start, top, steps=u.shape[-1] + 1, dtype=torch.float32, device=u.device)
    lower, upper = boundaries[:-1].long(), boundaries[1:].long()
    return lower + (u.float() * (upper - lower)).long()


def stratified_steps(u: torch.Tensor, sampling_steps: int, fraction: float, mode: str) -> torch.Tensor:
    """Grid indices (..., T) from uniform draws ``u`` (..., T) in [0, 1), in float32 as theirs (``torch.rand`` and
    ``torch.linspace`` of the default dtype); ``discrete_with_init`` reads only the first T - 1 columns of ``u``."""
    if mode not in tuple(TimeSampling):
        raise ValueError(f"time_sampling must be one of {', '.join(TimeSampling)}, got {mode!r}")
    top = int(sampling_steps * fraction)
    if mode == TimeSampling.discrete:
        return _slices(u, 0, top)
    if mode == TimeSampling.discrete_wo_init:
        return _slices(u, 1, top)
    first = torch.zeros((*u.shape[:-1], 1), dtype=torch.long, device=u.device)
    if u.shape[-1] == 1:
        return first
    return torch.cat([first, _slices(u[..., :-1], 1, top)], dim=-1)
