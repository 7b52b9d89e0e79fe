"""Adjoint Matching's lean adjoint ODE (arXiv:2409.08861, Eqs. 37-41), integrated backward with vector-Jacobian
products (docs/methods/eam.md#adjoint-matching).

    d a / dt = -[grad_x b(X_t, t)]^T a,     a(1) = grad g(X_1) = -lambda grad r(X_1),

with the *base* (frozen pretrained) memoryless drift ``b = 2 v_pre - kappa_t x``, so
``[grad_x b]^T a = 2 (d v_pre / d x)^T a - kappa_t a``. Discretised backward on the rollout's grid as AM does (its
Algorithm 1 and the lean adjoint's Euler step, arXiv:2409.08861): each backward step starts from the point it leaves,

    a_k = a_{k+1} + h_k [grad_x b(X_{k+1}, t_{k+1})]^T a_{k+1},

explicit Euler of the ODE run from t = 1 down to 0. The Jacobian at the left point ``(X_k, t_k)`` (the discrete
adjoint of the Euler–Maruyama rollout, used here before) lags the singular ``kappa_t = 1/(t + h)`` by one step: on the
1-D Gaussian toy at K = 40 it under-estimates the adjoint at t = 0.25 by 15 %, against 1.5 % for this step
(docs/methods/eam.md#the-lean-adjoint-step; tests/test_soc_math.py). Each step costs one forward + backward of the
frozen model, which the caller provides as a VJP function. Everything here is detached (no parameter gradients).
"""

from __future__ import annotations

from typing import Callable

import torch

from methods.memoryless import MemorylessSchedule, expand_time

#: ``vjp(k, a) -> (d v_pre / d x)^T a`` at the rollout state ``X_k`` (time ``t_k``); :meth:`LeanAdjointSolver.solve`
#: asks for k = K..1 (never 0: the step that lands on ``a_0`` starts from ``X_1``)
VJPFn = Callable[[int, torch.Tensor], torch.Tensor]


class LeanAdjointSolver:
    """Backward Euler integration of the lean adjoint of the memoryless base drift.

    Args:
        schedule: gives ``kappa_t`` (with its offset ``h``).
    """

    def __init__(self, schedule: MemorylessSchedule):
        self.schedule = schedule

    def step(self, a_next: torch.Tensor, vjp_v: torch.Tensor, t: torch.Tensor, dt: torch.Tensor) -> torch.Tensor:
        """``a_k = a_{k+1} + dt (2 vjp_v - kappa_t a_{k+1})`` with ``vjp_v = (d v_pre/d x)^T a_{k+1}``, both at the
        step's starting point ``(X_{k+1}, t = t_{k+1})``."""
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
            t = ts[k + 1].expand(b)  # the step from a_{k+1} to a_k starts at (X_{k+1}, t_{k+1}) (module docstring)
            dt = (ts[k + 1] - ts[k]).expand(b)
            a = self.step(a, vjp(k + 1, a).to(a.dtype), t, dt)
            if out is not None:
                out[:, k] = a
            else:
                assert keep is not None  # out is None only when keep is given
                keep(k, a)
        return out if out is not None else a
