"""EAM's endpoint-conditional kernel ``q_t(x_t | x_1)`` (docs/methods/eam.md#the-kernel; a reconstruction).

The linear memoryless base of :mod:`methods.linear_base` has the same bridge as flow matching's noising process, so
intermediate states are drawn from the endpoint alone, without simulating a trajectory:
``X_t = t X_1 + (1 - t) eps``, i.e. ``q_t(. | x_1) = N(t x_1, (1 - t)^2 I)`` for rectified flow (independent of the
base's ``c``). Composed with ``X_1 ~ N(0, c^2 I)`` it gives the base marginal ``N(0, m_t I)``.
"""

from __future__ import annotations

import torch

from methods.memoryless import expand_time


class BridgeKernel:
    """Rectified-flow kernel ``alpha_t = t``, ``beta_t = 1 - t`` (every current backbone family)."""

    @staticmethod
    def mean_std(x1: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean ``t x_1`` (like ``x1``) and per-sample std ``1 - t`` (B,) float64."""
        return expand_time(t.double(), x1) * x1, 1.0 - t.double()

    @classmethod
    def sample(cls, x1: torch.Tensor, t: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """``X_t = t x_1 + (1 - t) noise`` for per-sample times ``t`` (B,) and standard normal ``noise``."""
        mean, std = cls.mean_std(x1, t)
        return mean + expand_time(std, x1) * noise.to(x1.dtype)
