"""The memoryless noise schedule of Adjoint Matching for rectified flow (docs/methods/eam.md#the-control-problem).

AM time: ``t = 0`` noise, ``t = 1`` data, ``X_t = t X_1 + (1 - t) X_0``. With ``kappa_t = 1/t``,
``eta_t = (1 - t)/t`` and ``sigma(t) = sqrt(2 eta_t)``, the SDE ``dX = (2 v - kappa_t X) dt + sigma(t) dB`` has the
marginals of the ODE ``dX = v dt`` and makes ``X_0`` independent of ``X_1`` (memoryless), which is what lets the
terminal cost ``-lambda r`` produce exactly ``p_pre exp(lambda r)``.

Both are singular at ``t = 0`` (and ``sigma`` vanishes at ``t = 1``), so AM's App. G.1 offsets them by ``h``:
``sigma(t) = sqrt(2 (1 - t + h) / (t + h))`` and ``kappa_t = 1 / (t + h)`` (``h = 1/40``; ``h = 0`` gives the exact
schedule, usable on grids that avoid ``t = 0``). Written like a diffusers scheduler: stateless, float64 coefficients,
per-sample times ``t`` of shape (B,) broadcast over the latent.
"""

from __future__ import annotations

import torch


def expand_time(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """(B,) -> (B, 1, ..., 1) in ``like``'s dtype and device (the methods pass device times: moved only if not)."""
    t = t.to(like.dtype) if t.device == like.device else t.to(like.device, like.dtype)
    return t.reshape(-1, *([1] * (like.dim() - 1)))


class MemorylessSchedule:
    """Memoryless diffusion coefficient, its drift and the control <-> velocity maps.

    Args:
        offset: ``h`` above (AM: 1/40; a third-party SD3 implementation uses 1e-3; 0 = exact schedule).
    """

    def __init__(self, offset: float = 1.0 / 40):
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        self.offset = float(offset)

    # -- coefficients (float64 in, float64 out) -------------------------------------------------------------------
    def kappa(self, t: torch.Tensor) -> torch.Tensor:
        """``kappa_t = alpha_dot / alpha = 1 / (t + h)``."""
        return 1.0 / (t.double() + self.offset)

    def eta(self, t: torch.Tensor) -> torch.Tensor:
        """``eta_t = (1 - t + h) / (t + h)`` = ``sigma(t)^2 / 2``."""
        t = t.double()
        return (1.0 - t + self.offset) / (t + self.offset)

    def sigma(self, t: torch.Tensor) -> torch.Tensor:
        """Diffusion coefficient ``sigma(t) = sqrt(2 eta_t)``."""
        return torch.sqrt(2.0 * self.eta(t))

    def loss_weight(self, t: torch.Tensor) -> torch.Tensor:
        """``4 / sigma(t)^2 = 2 (t + h) / (1 - t + h)``: the weight that turns the control-space AM loss into a
        velocity-space regression."""
        return 2.0 / self.eta(t)

    @staticmethod
    def grid(num_steps: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """Uniform AM-time grid ``t_k = k / K``, k = 0..K (K + 1 points, noise to data)."""
        return torch.arange(num_steps + 1, dtype=dtype) / num_steps

    # -- dynamics -----------------------------------------------------------------------------------------------
    def drift(self, x: torch.Tensor, v: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """Memoryless drift ``2 v - kappa_t x`` of a velocity field ``v`` (AM's base drift when ``v = v_pre``)."""
        return 2.0 * v - expand_time(self.kappa(t), x) * x

    def em_step(
        self, x: torch.Tensor, v: torch.Tensor, t: torch.Tensor, dt: float | torch.Tensor, noise: torch.Tensor
    ) -> torch.Tensor:
        """Euler–Maruyama step ``x + dt (2 v - kappa x) + sqrt(dt) sigma(t) noise`` (AM's rollout)."""
        dt = torch.as_tensor(dt, dtype=torch.float64)
        dt = dt.expand(t.shape) if dt.dim() == 0 else dt
        return (
            x
            + expand_time(dt, x) * self.drift(x, v, t)
            + expand_time(torch.sqrt(dt) * self.sigma(t), x) * noise.to(x.dtype)
        )

    # -- control parameterisation (docs/methods/eam.md#the-control-problem) --------------------------------------
    def control(self, v_finetuned: torch.Tensor, v_base: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """``u = (2 / sigma(t)) (v_finetuned - v_base)``: the control that turns the base drift into the fine-tuned
        one (zero at initialisation when the base is the frozen pretrained model)."""
        return expand_time(2.0 / self.sigma(t), v_finetuned) * (v_finetuned - v_base)

    def velocity_from_control(self, v_base: torch.Tensor, u: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """Inverse of :meth:`control`: ``v_base + (sigma(t) / 2) u``."""
        return v_base + expand_time(self.sigma(t) / 2.0, u) * u


def score_from_velocity(v: torch.Tensor, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """Rectified-flow score ``grad log p_t(x) = (t v - x) / (1 - t)`` (docs/methods/eam.md#time-convention); singular at
    ``t = 1``."""
    tt = expand_time(t.double(), x)
    return (tt * v - x) / (1.0 - tt)


def denoised(x: torch.Tensor, v: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """Tweedie's posterior mean ``E[X_1 | X_t = x] = x + (1 - t) v(x, t)`` (docs/methods/eam.md#time-convention)."""
    return x + expand_time(1.0 - t.double(), x) * v
