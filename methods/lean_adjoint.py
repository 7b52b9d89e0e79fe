"""Adjoint Matching's lean adjoint ODE (arXiv:2409.08861, Eqs. 37-41), integrated backward with vector-Jacobian
products (docs/methods/eam.md#adjoint-matching).

    d a / dt = -[grad_x b(X_t, t)]^T a,     a(1) = grad g(X_1) = -lambda grad r(X_1),

with the *base* (frozen pretrained) memoryless drift ``b = 2 v_pre - kappa_t x``, so
``[grad_x b]^T a = 2 (d v_pre / d x)^T a - kappa_t a``. Discretised backward on the rollout's grid
(``a_k = a_{k+1} + h_k [grad_x b(X_k, t_k)]^T a_{k+1}``); each step costs one forward + backward of the frozen model,
which the caller provides as a VJP function. Everything here is detached (no parameter gradients).
"""

from __future__ import annotations

from typing import Callable

import torch

from methods.memoryless import MemorylessSchedule, expand_time

#: ``vjp(k, a) -> (d v_pre / d x)^T a`` at the rollout state ``X_k`` (time ``t_k``)
VJPFn = Callable[[int, torch.Tensor], torch.Tensor]


class LeanAdjointSolver:
    """Backward Euler integration of the lean adjoint of the memoryless base drift.

    Args:
        schedule: gives ``kappa_t`` (with its offset ``h``).
    """

    def __init__(self, schedule: MemorylessSchedule):
        self.schedule = schedule

    def step(self, a_next: torch.Tensor, vjp_v: torch.Tensor, t: torch.Tensor, dt: torch.Tensor) -> torch.Tensor:
        """``a_k = a_{k+1} + dt (2 vjp_v - kappa_{t_k} a_{k+1})`` with ``vjp_v = (d v_pre/d x)^T a_{k+1}`` at X_k."""
        kappa = expand_time(self.schedule.kappa(t), a_next)
        return a_next + expand_time(dt.double(), a_next) * (2.0 * vjp_v - kappa * a_next)

    @torch.no_grad()
    def solve(
        self,
        vjp: VJPFn,
        ts: torch.Tensor,
        a_terminal: torch.Tensor,
        keep: Callable[[int, torch.Tensor], None] | None = None,
    ) -> torch.Tensor:
        """Integrate from ``a_K = a_terminal`` at ``ts[K]`` back to ``ts[0]`` on the increasing grid ``ts`` (K + 1,).

        Returns all adjoints ``a_0..a_K`` (B, K + 1, *shape), or, when ``keep(k, a_k)`` is given (to store only what
        the loss needs), calls it for every k = K..0 and returns ``a_0``.
        """
        num = ts.numel() - 1
        b = a_terminal.shape[0]
        out = None
        if keep is None:
            out = torch.empty((b, num + 1, *a_terminal.shape[1:]), dtype=a_terminal.dtype, device=a_terminal.device)
            out[:, num] = a_terminal
        else:
            keep(num, a_terminal)
        a = a_terminal
        for k in range(num - 1, -1, -1):
            t = ts[k].expand(b)
            dt = (ts[k + 1] - ts[k]).expand(b)
            a = self.step(a, vjp(k, a).to(a.dtype), t, dt)
            if out is not None:
                out[:, k] = a
            else:
                assert keep is not None  # out is None only when keep is given
                keep(k, a)
        return out if out is not None else a
