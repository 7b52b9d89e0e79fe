"""EAM's linear memoryless base process (docs/methods/eam.md#the-linear-base; a reconstruction, behind ``method.c``).

EAM replaces Adjoint Matching's base drift ``2 v_pre - kappa x`` by a *linear* drift ``D_c(t) x`` that keeps the
same memoryless ``sigma(t)`` and the same bridge as the flow-matching noising process. The admissible choice derived
in the docs is the memoryless SDE of the flow-matching model whose data is ``N(0, c^2 I)``; for rectified flow, with
``m_t = (1 - t)^2 + c^2 t^2``:

* its velocity is linear: ``v_c(x, t) = (c^2 t - (1 - t)) / m_t * x = m_t' / (2 m_t) * x``;
* its drift is ``D_c(t) x`` with ``D_c = 2 m_t'/(2 m_t) - 1/t = ((c^2 + 1) t^2 - 1) / (t m_t)``;
* its marginal is ``X_t ~ N(0, m_t I)``, its terminal law ``N(0, c^2 I)``, and ``X_0`` is independent of ``X_1``;
* the lean adjoint ODE ``a' = -D_c a`` integrates in closed form with the propagator
  ``Phi(1, t) = exp(int_t^1 D_c) = c^2 t / m_t``;
* its bridge ``q_t(x_t | x_1) = N(t x_1, (1 - t)^2 I)`` does not depend on ``c`` (see :mod:`methods.bridge_kernel`).

``c`` is the paper's constant "C" only by our guess (docs/methods/eam.md#what-is-reconstructed); ``c = 1`` suits
unit-variance latents. Do not use ``c -> infinity`` (the improper base ``D = 1/t``): its target weights explode near
the noise end.
All coefficients are computed in float64 from per-sample times ``t`` (B,).
"""

from __future__ import annotations

import torch

from methods.memoryless import expand_time


class LinearMemorylessBase:
    """The base ``dX = D_c(t) X dt + sigma(t) dB`` with ``sigma(t)^2 = 2 (1 - t) / t`` and ``X_0 ~ N(0, I)``.

    Args:
        c: standard deviation of the base's terminal law ``N(0, c^2 I)`` (> 0; default 1).
    """

    def __init__(self, c: float = 1.0):
        if not c > 0:
            raise ValueError(f"c must be > 0 (got {c})")
        self.c = float(c)
        self.c2 = self.c**2

    def m(self, t: torch.Tensor) -> torch.Tensor:
        """Base marginal variance ``m_t = (1 - t)^2 + c^2 t^2``."""
        t = t.double()
        return (1.0 - t) ** 2 + self.c2 * t**2

    def m_dot(self, t: torch.Tensor) -> torch.Tensor:
        t = t.double()
        return -2.0 * (1.0 - t) + 2.0 * self.c2 * t

    def velocity_coef(self, t: torch.Tensor) -> torch.Tensor:
        """``v_c(x, t) / x = (c^2 t - (1 - t)) / m_t``."""
        return 0.5 * self.m_dot(t) / self.m(t)

    def velocity(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """The Gaussian flow-matching velocity ``v_c(x, t)`` (the base's velocity, in ``x``'s dtype)."""
        return expand_time(self.velocity_coef(t), x) * x

    def drift_coef(self, t: torch.Tensor) -> torch.Tensor:
        """``D_c(t) = ((c^2 + 1) t^2 - 1) / (t m_t)`` (singular like ``-1/t`` at the noise end)."""
        t = t.double()
        return ((self.c2 + 1.0) * t**2 - 1.0) / (t * self.m(t))

    def propagator(self, t: torch.Tensor, s: torch.Tensor | float = 1.0) -> torch.Tensor:
        """``Phi(s, t) = exp(int_t^s D_c) = (m_s / m_t) (t / s)``; ``Phi(1, t) = c^2 t / m_t``."""
        t = t.double()
        s = torch.as_tensor(s, dtype=torch.float64)
        return (self.m(s) / self.m(t)) * (t / s)

    def terminal_score(self, x: torch.Tensor) -> torch.Tensor:
        """Score of the base's terminal law, ``-x / c^2``."""
        return -x / self.c2

    def target_coef(self, t: torch.Tensor) -> torch.Tensor:
        """``(sigma(t)^2 / 2) Phi(1, t) = c^2 (1 - t) / m_t``, the factor that turns the terminal-cost gradient into the
        velocity-space regression target (exact ``sigma``, no offset: the identity must hold exactly)."""
        t = t.double()
        return self.c2 * (1.0 - t) / self.m(t)
