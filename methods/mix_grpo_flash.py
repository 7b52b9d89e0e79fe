"""MixGRPO-Flash's rollout after the window (arXiv:2507.21802; docs/methods/mix_grpo.md#mixgrpo-flash): once the last
SDE step ``s`` of the window has reached ``sigma_{s+1}``, the remaining ODE runs DPM-Solver++ (2M,
:mod:`methods.dpm_solver`) on a compressed grid of ``P`` sigmas from ``sigma_{s+1}`` to 0, shifted as the N-step grid
(the authors' ``dpm_apply_strategy="post"``: fastvideo/utils/sampling_utils.py ``run_sample_step`` at
Tencent-Hunyuan/MixGRPO @e5cdd6a). Its first step's history is the data prediction of the window's last step; its
last step (to sigma = 0) is first order. Nothing after the window is trained, so nothing of it is kept.
"""

from __future__ import annotations

from typing import Callable

import torch

from methods.chunking import chunked_velocity
from methods.dpm_solver import dpm_solver_pp_step
from methods.schedule import time_shift
from models.backbone import Backbone, PromptEmbeds


def flash_sigmas(sigmas: torch.Tensor, last: int, points: int, shift: float) -> list[float]:
    """The rollout grid: the N-step grid's ``sigma_0 .. sigma_{last+1}``, then ``points - 1`` sigmas down to 0 at
    equal steps of the unshifted time ``1 - i/N`` (from ``1 - (last + 1)/N``), SD3-shifted by ``shift``."""
    n = sigmas.numel() - 1
    t = torch.linspace(1.0 - (last + 1) / n, 0.0, points, dtype=torch.float64)
    head = sigmas.detach().to("cpu", torch.float64)[: last + 2]
    return head.tolist() + time_shift(t, shift)[1:].tolist()


@torch.no_grad()
def post_window_ode(
    backbone: Backbone,
    x: torch.Tensor,
    x0_last: torch.Tensor,
    grid: list[float],
    start: int,
    embeds: PromptEmbeds,
    model_time: Callable[[torch.Tensor], torch.Tensor],
    rollout_chunk: int,
    solver_type: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Steps ``start .. len(grid) - 2`` of ``grid`` from ``x`` at ``grid[start]`` (``x0_last``: the data prediction at
    ``grid[start - 1]``), ``rollout_chunk`` rows per transformer call; returns the final state and the last step's
    data prediction (what ``method.decode=pred_x0`` decodes)."""
    x0_prev, x0 = x0_last, x0_last
    end = len(grid) - 1
    for k in range(start, end):
        sigma = torch.full((x.shape[0],), grid[k], dtype=torch.float64, device=x.device)
        v = chunked_velocity(backbone, x, model_time(sigma).float(), embeds, rollout_chunk)
        x0 = x - grid[k] * v.to(x.dtype)
        history = None if k == end - 1 else x0_prev  # the final step is first order (lower_order_final)
        x = dpm_solver_pp_step(x, x0, history, (grid[k - 1], grid[k], grid[k + 1]), solver_type)
        x0_prev = x0
    return x, x0
