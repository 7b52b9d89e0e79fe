"""One step of the multistep DPM-Solver++ (Lu et al., arXiv:2211.01095, Alg. 2 "2M" and its first-order step) for a
rectified flow ``x_sigma = (1 - sigma) x0 + sigma eps`` in data prediction ``x0 = x - sigma v``: ``alpha = 1 - sigma``,
``lambda = log(alpha / sigma)``, ``h = lambda_next - lambda``.

It is diffusers' ``DPMSolverMultistepScheduler`` step (``algorithm_type="dpmsolver++"``, flow prediction, orders 1
and 2, ``solver_type`` midpoint or heun) written as a function of the three sigmas it reads, for two reasons: the
scheduler casts the sample and its sigmas to float32 (diffusers 0.42, ``step``), so it cannot be held to the authors'
float64 values at 1e-6; and MixGRPO-Flash starts it in the middle of a rollout, with the data prediction of the
preceding SDE step as its history (tests/test_mix_grpo.py checks both against the authors' code and against the
scheduler). The coefficients are float64 host scalars: no step reads the device.
"""

from __future__ import annotations

import math

import torch


def _lambda(sigma: float) -> float:
    """``log(alpha) - log(sigma)``; -inf at sigma = 1 (alpha = 0), +inf at sigma = 0, as torch's logs give."""
    if sigma >= 1.0:
        return -math.inf
    if sigma <= 0.0:
        return math.inf
    return math.log(1.0 - sigma) - math.log(sigma)


def dpm_solver_pp_step(
    x: torch.Tensor,
    x0: torch.Tensor,
    x0_prev: torch.Tensor | None,
    sigmas: tuple[float, float, float],
    solver_type: str = "midpoint",
) -> torch.Tensor:
    """The state at ``sigma_next`` from ``x`` at ``sigma`` and its data prediction ``x0``; ``sigmas`` is
    ``(sigma_prev, sigma, sigma_next)``. With ``x0_prev`` (the data prediction at ``sigma_prev``) the second-order
    multistep update, without it the first-order one (DDIM: the Euler step of the flow)."""
    sigma_prev, sigma, sigma_next = (float(s) for s in sigmas)
    alpha_next = 1.0 - sigma_next
    h = _lambda(sigma_next) - _lambda(sigma)
    decay = math.exp(-h) - 1.0  # e^{-h} - 1
    out = (sigma_next / sigma) * x - (alpha_next * decay) * x0
    if x0_prev is None:
        return out
    if sigma_next <= 0.0:  # h is infinite: the second-order term is undefined (inf x 0)
        raise ValueError("the step to sigma = 0 is first order (lower_order_final): pass x0_prev=None")
    r0 = (_lambda(sigma) - _lambda(sigma_prev)) / h
    d1 = (1.0 / r0) * (x0 - x0_prev)
    if solver_type == "midpoint":
        return out - (0.5 * alpha_next * decay) * d1
    if solver_type == "heun":
        return out + (alpha_next * (decay / h + 1.0)) * d1
    raise ValueError(f"unknown DPM-Solver++ type {solver_type!r}; expected midpoint or heun")
