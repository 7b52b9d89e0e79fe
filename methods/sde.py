"""Stochastic sampler with Gaussian log-probabilities for flow-matching GRPO
(docs/methods/grpo_baselines.md#the-sde-step, docs/methods/grpo_baselines.md#log-probability).

The two baselines take the same Euler–Maruyama step of the marginal-preserving reverse SDE and differ only in the
diffusion coefficient ``g``; this module writes that step once, in the style of a diffusers scheduler.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from methods.grpo_config import NoiseKernel


@dataclass
class SDEStepOutput:
    """Result of :meth:`FlowSDEScheduler.step`.

    Args:
        prev_sample: the next state ``x_{i+1}`` (ODE states where the step was deterministic).
        mean: the step's mean ``mu_theta(x_i)`` (fp32 or fp64).
        std: per-sample noise std ``g_i sqrt(-Delta_i)``; 0 for deterministic steps.
        log_prob: per-sample mean-over-elements Gaussian log-density of ``prev_sample``; NaN for deterministic steps.
    """

    prev_sample: torch.Tensor
    mean: torch.Tensor
    std: torch.Tensor
    log_prob: torch.Tensor


def _expand(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return t.reshape(t.shape[0], *([1] * (like.dim() - 1)))


def gaussian_log_prob(sample: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """Per-element *mean* Gaussian log-density: averaging instead of summing shrinks log-ratios by the
    number of latent elements D, which is why PPO clip ranges of 1e-4 are meaningful. Computed in at least fp32."""
    dtype = torch.promote_types(mean.dtype, torch.float32)
    sample, mean, std = sample.to(dtype), mean.to(dtype), std.to(dtype)
    s = _expand(std, mean)
    sq = -((sample.detach() - mean) ** 2) / (2 * s**2)
    return sq.flatten(1).mean(1) - torch.log(std) - 0.5 * math.log(2 * math.pi)


class FlowSDEScheduler:
    """Euler–Maruyama step of the reverse SDE that keeps the flow's marginals
    (docs/methods/grpo_baselines.md#the-sde-step).

    ``mu = x + Delta [v + g^2 / (2 sigma) (x + (1 - sigma) v)]`` and ``std = g sqrt(-Delta)``.

    Args:
        sigmas: ``(N + 1,)`` decreasing schedule with ``sigmas[0] = 1`` (or the scheduler's first sigma) and
            ``sigmas[N] = 0``.
        noise_kernel: ``"dance"`` for DanceGRPO's constant ``g = eta``; ``"flow"`` for Flow-GRPO's
            ``g = a sqrt(sigma / (1 - sigma))`` where, at ``sigma = 1``, the denominator uses ``1 - sigmas[1]``;
            ``"linear"`` for the Wan pipelines of Flow-GRPO and Flash-GRPO:
            ``g = eta (sigma_min + (sigma_max - sigma_min) sigma)`` with ``sigma_max = sigmas[1]`` (the *second* grid
            entry) and ``sigma_min = sigmas[N]`` (= 0), i.e. ``g = sigmas[1] sigma`` at the official ``eta = 1``.
        eta: ``eta`` (dance), the noise level ``a`` (flow) or a multiplier of the linear kernel (1 = official).
    """

    def __init__(self, sigmas: torch.Tensor, noise_kernel: str = "dance", eta: float = 0.3):
        if noise_kernel not in tuple(NoiseKernel):
            raise ValueError(f"noise_kernel must be one of {', '.join(NoiseKernel)}, got {noise_kernel!r}")
        self.sigmas = sigmas.to(torch.float64)
        self.noise_kernel = noise_kernel
        self.eta = float(eta)

    @property
    def num_steps(self) -> int:
        return self.sigmas.numel() - 1

    def sigma(self, index: torch.Tensor) -> torch.Tensor:
        return self.sigmas.to(index.device)[index]

    def diffusion_coef(self, index: torch.Tensor) -> torch.Tensor:
        """``g_i`` per sample (float64), for step indices ``index`` of shape (B,)."""
        sigma = self.sigma(index)
        if self.noise_kernel == "dance":
            return torch.full_like(sigma, self.eta)
        if self.noise_kernel == "linear":
            lo, hi = self.sigmas[-1].to(sigma.device), self.sigmas[1].to(sigma.device)
            return self.eta * (lo + (hi - lo) * sigma)
        one_minus = torch.where(sigma >= 1.0, 1.0 - self.sigmas[1].to(sigma.device), 1.0 - sigma)
        return self.eta * torch.sqrt(sigma / one_minus)

    def velocity_coef(self, index: torch.Tensor, stochastic: torch.Tensor | bool = True) -> torch.Tensor:
        """``kappa_i = d mu / d v``, used by closed-form upstream gradients (JAGG, Flash-GRPO)."""
        sigma, delta = self.sigma(index), self.sigmas.to(index.device)[index + 1] - self.sigma(index)
        g = self.diffusion_coef(index) * torch.as_tensor(stochastic, device=index.device)
        return delta * (1 + g**2 * (1 - sigma) / (2 * sigma))

    def mean_std(self, sample: torch.Tensor, velocity: torch.Tensor, index: torch.Tensor,
                 stochastic: torch.Tensor | bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and std of ``x_{i+1} | x_i`` in fp32 (fp64 if the inputs are fp64). ``stochastic=False`` rows get
        ``g = 0``, i.e. exactly the ODE Euler step of diffusers' FlowMatchEulerDiscreteScheduler."""
        dtype = torch.promote_types(velocity.dtype, torch.float32)
        x, v = sample.to(dtype), velocity.to(dtype)
        sigma = self.sigma(index)
        delta = self.sigmas.to(index.device)[index + 1] - sigma
        g = self.diffusion_coef(index) * torch.as_tensor(stochastic, device=index.device, dtype=torch.float64)
        a = (g**2 / (2 * sigma)).to(dtype)
        d, s1 = _expand(delta.to(dtype), x), _expand((1 - sigma).to(dtype), x)
        mean = x + d * (v + _expand(a, x) * (x + s1 * v))
        std = (g * torch.sqrt(-delta)).to(dtype)
        return mean, std

    def step(self, sample: torch.Tensor, velocity: torch.Tensor, index: torch.Tensor,
             stochastic: torch.Tensor | bool = True, noise: torch.Tensor | None = None,
             generator: torch.Generator | None = None) -> SDEStepOutput:
        """One sampling step from ``x_i`` (``sample``) with predicted velocity ``velocity``.

        Args:
            index: (B,) long tensor of step indices i (rows may sit at different steps).
            stochastic: bool or (B,) bool tensor; False rows take the deterministic Euler step.
            noise: optional standard normal ``xi``; drawn from ``generator`` otherwise.
        """
        mean, std = self.mean_std(sample, velocity, index, stochastic)
        if noise is None:
            noise = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
        prev = mean + _expand(std, mean) * noise.to(mean.dtype)
        log_prob = torch.where(std > 0, gaussian_log_prob(prev, mean, torch.where(std > 0, std, 1.0)),
                               torch.full_like(std, float("nan")))
        return SDEStepOutput(prev_sample=prev.to(sample.dtype), mean=mean, std=std, log_prob=log_prob)

    def log_prob(self, prev_sample: torch.Tensor, sample: torch.Tensor, velocity: torch.Tensor,
                 index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Recompute ``(log pi(x_{i+1} | x_i), mean)`` for a stochastic step with a (possibly new) velocity."""
        mean, std = self.mean_std(sample, velocity, index, True)
        return gaussian_log_prob(prev_sample, mean, std), mean

    def pred_x0(self, sample: torch.Tensor, velocity: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """Predicted clean sample ``x - sigma v`` (what DanceGRPO decodes at the last step)."""
        return sample - _expand(self.sigma(index).to(sample.dtype), sample) * velocity.to(sample.dtype)
