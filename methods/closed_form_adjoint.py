"""EAM's corrected terminal cost and its closed-form adjoint (docs/methods/eam.md#the-corrected-terminal-cost).

With the linear memoryless base of :mod:`methods.linear_base` the terminal cost is corrected so that the optimum is
still ``p* ~ p_pre exp(lambda r)``:

    g(x) = -lambda r(x) - log p_pre(x) + log N(x; 0, c^2 I)
    grad g(x) = -lambda grad r(x) - grad log p_pre(x) + (-x / c^2)

(the pretrained data score at ``t = 1`` from :mod:`methods.terminal_score`, and the base's terminal score). Because
the base drift is linear, the lean adjoint ODE ``a' = -D_c a`` integrates exactly:
``a(t) = Phi(1, t) grad g(X_1)`` -- no backward ODE, no vector-Jacobian products. The AM regression target
``u* = -sigma a`` then reads, in velocity space (weight ``4 / sigma^2``):

    v_tgt(X_t, t) = v_c(X_t, t) - c^2 (1 - t) / m_t * grad g(X_1)
"""

from __future__ import annotations

import torch

from methods.linear_base import LinearMemorylessBase
from methods.memoryless import expand_time


def corrected_terminal_grad(
    base: LinearMemorylessBase,
    x1: torch.Tensor,
    reward_grad: torch.Tensor,
    pretrained_score: torch.Tensor,
    reward_scale: float,
) -> torch.Tensor:
    """``grad g(x_1) = -lambda grad r - grad log p_pre - x_1 / c^2`` (same shape as ``x1``)."""
    return -reward_scale * reward_grad - pretrained_score + base.terminal_score(x1)


def closed_form_adjoint(base: LinearMemorylessBase, terminal_grad: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """Lean adjoint of the linear base at per-sample times ``t``: ``a(t) = Phi(1, t) grad g(X_1)``."""
    return expand_time(base.propagator(t), terminal_grad) * terminal_grad


def velocity_target(
    base: LinearMemorylessBase, x_t: torch.Tensor, t: torch.Tensor, terminal_grad: torch.Tensor
) -> torch.Tensor:
    """EAM's velocity-space regression target ``v_c(x_t, t) - c^2 (1 - t) / m_t * grad g(X_1)``
    (docs/methods/eam.md#closed-form-adjoint-and-target)."""
    return base.velocity(x_t, t) - expand_time(base.target_coef(t), terminal_grad) * terminal_grad
