"""Stochastic sampler with log-probabilities for flow-matching GRPO
(docs/methods/grpo_baselines.md#the-sde-step, docs/methods/grpo_baselines.md#log-probability).

The two baselines take the same Euler–Maruyama step of the marginal-preserving reverse SDE and differ only in the
diffusion coefficient ``g``; this module writes that step once, in the style of a diffusers scheduler. It also holds
Flow-GRPO's coefficient-preserving step (``noise_kernel="cps"``, docs/cps.md), which is not an Euler–Maruyama step
and whose log-prob is not a normalised density.
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
        log_prob: per-sample mean-over-elements log-prob of ``prev_sample`` in the kernel's convention (the Gaussian
            log-density; for ``cps`` upstream's unnormalised ``-mean ||x_{i+1} - mu||^2``); NaN for deterministic
            steps.
    """

    prev_sample: torch.Tensor
    mean: torch.Tensor
    std: torch.Tensor
    log_prob: torch.Tensor


def _expand(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return t.reshape(t.shape[0], *([1] * (like.dim() - 1)))


def _rows(stochastic: torch.Tensor | bool, index: torch.Tensor) -> torch.Tensor:
    """``stochastic`` (a bool, or a (B,) bool tensor on the device) as float64 0/1 per row of ``index``, made on the
    device: ``torch.as_tensor(True, device=...)`` copies a host scalar, a sync per call on CUDA."""
    if isinstance(stochastic, torch.Tensor):
        return stochastic.to(torch.float64).expand(index.shape)
    return torch.full(index.shape, float(bool(stochastic)), dtype=torch.float64, device=index.device)


def gaussian_log_prob(sample: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """Per-element *mean* Gaussian log-density: averaging instead of summing shrinks log-ratios by the
    number of latent elements D, which is why PPO clip ranges of 1e-4 are meaningful. Computed in at least fp32."""
    dtype = torch.promote_types(mean.dtype, torch.float32)
    sample, mean, std = sample.to(dtype), mean.to(dtype), std.to(dtype)
    s = _expand(std, mean)
    sq = -((sample.detach() - mean) ** 2) / (2 * s**2)
    return sq.flatten(1).mean(1) - torch.log(std) - 0.5 * math.log(2 * math.pi)


def cps_log_prob(sample: torch.Tensor, mean: torch.Tensor) -> torch.Tensor:
    """Flow-GRPO's CPS log-prob: ``-mean_D ||x_{i+1} - mu||^2``, with no ``1 / (2 std^2)`` and no constants (upstream
    "remove all constants"). Ratios of it are not likelihood ratios of the step's Gaussian; they are what upstream's
    PPO clips. Computed in at least fp32."""
    dtype = torch.promote_types(mean.dtype, torch.float32)
    return -((sample.detach().to(dtype) - mean.to(dtype)) ** 2).flatten(1).mean(1)


class FlowSDEScheduler:
    """Euler–Maruyama step of the reverse SDE that keeps the flow's marginals
    (docs/methods/grpo_baselines.md#the-sde-step), or Flow-GRPO's CPS step (docs/cps.md).

    ``mu = x + Delta [v + g^2 / (2 sigma) (x + (1 - sigma) v)]`` and ``std = g sqrt(-Delta)``. CPS (coefficient-
    preserving sampling, ``sde_type="cps"`` of flow_grpo's ``sde_step_with_logprob``) instead re-noises the predicted
    clean sample at the next level with coefficients whose squares sum to the flow's: ``std = sigma_{i+1} sin(a pi/2)``
    and ``mu = x0_hat (1 - sigma_{i+1}) + x1_hat sqrt(sigma_{i+1}^2 - std^2)`` with ``x0_hat = x - sigma v`` and
    ``x1_hat = x + (1 - sigma) v``; its log-prob is :func:`cps_log_prob`.

    Args:
        sigmas: ``(N + 1,)`` decreasing schedule with ``sigmas[0] = 1`` (or the scheduler's first sigma) and
            ``sigmas[N] = 0``.
        noise_kernel: ``"dance"`` for DanceGRPO's constant ``g = eta``; ``"flow"`` for Flow-GRPO's
            ``g = a sqrt(sigma / (1 - sigma))`` where, at ``sigma = 1``, the denominator uses ``1 - sigmas[1]``;
            ``"linear"`` for the Wan pipelines of Flow-GRPO and Flash-GRPO:
            ``g = eta (sigma_min + (sigma_max - sigma_min) sigma)`` with ``sigma_max = sigmas[1]`` (the *second* grid
            entry) and ``sigma_min = sigmas[N]`` (= 0), i.e. ``g = sigmas[1] sigma`` at the official ``eta = 1``;
            ``"cps"`` for Flow-GRPO's coefficient-preserving step (above).
        eta: ``eta`` (dance), the noise level ``a`` (flow, cps) or a multiplier of the linear kernel (1 = official).
    """

    def __init__(self, sigmas: torch.Tensor, noise_kernel: str = "dance", eta: float = 0.3):
        if noise_kernel not in tuple(NoiseKernel):
            raise ValueError(f"noise_kernel must be one of {', '.join(NoiseKernel)}, got {noise_kernel!r}")
        self.sigmas = sigmas.to(torch.float64)
        self.noise_kernel = noise_kernel
        self.eta = float(eta)
        # the table on each device it is indexed on, copied there once: a per-call move of the host table was a
        # device sync on CUDA per transformer call (issue 27; docs/performance.md#one-host-sync-per-update)
        self._tables: dict[torch.device, torch.Tensor] = {}

    def table(self, device: torch.device) -> torch.Tensor:
        """``sigmas`` (float64) on ``device``."""
        if device not in self._tables:
            self._tables[device] = self.sigmas.to(device)
        return self._tables[device]

    @property
    def num_steps(self) -> int:
        return self.sigmas.numel() - 1

    def sigma(self, index: torch.Tensor) -> torch.Tensor:
        return self.table(index.device)[index]

    def diffusion_coef(self, index: torch.Tensor) -> torch.Tensor:
        """``g_i`` per sample (float64), for step indices ``index`` of shape (B,). For ``cps``, the ``g`` whose
        ``g sqrt(-Delta)`` is the step's std, so that ``std = g sqrt(-Delta)`` holds for every kernel."""
        sigma = self.sigma(index)
        if self.noise_kernel == "cps":
            sigma_next = self.table(index.device)[index + 1]
            return self._cps_std(index) / torch.sqrt(sigma - sigma_next)
        if self.noise_kernel == "dance":
            return torch.full_like(sigma, self.eta)
        if self.noise_kernel == "linear":
            lo, hi = self.table(sigma.device)[-1], self.table(sigma.device)[1]
            return self.eta * (lo + (hi - lo) * sigma)
        one_minus = torch.where(sigma >= 1.0, 1.0 - self.table(sigma.device)[1], 1.0 - sigma)
        return self.eta * torch.sqrt(sigma / one_minus)

    def velocity_coef(self, index: torch.Tensor, stochastic: torch.Tensor | bool = True) -> torch.Tensor:
        """``kappa_i = d mu / d v``, used by closed-form upstream gradients (JAGG, Flash-GRPO).

        ``cps``: ``-sigma (1 - sigma_{i+1}) + (1 - sigma) sqrt(sigma_{i+1}^2 - std^2)``, which is ``Delta`` (Euler) when
        the step is deterministic or ``sigma = 1``, and otherwise more negative (the mean leans less on ``x1_hat``)."""
        sigma, delta = self.sigma(index), self.table(index.device)[index + 1] - self.sigma(index)
        if self.noise_kernel == "cps":
            x0_coef, x1_coef, _ = self._cps_coefs(index, stochastic)
            return -sigma * x0_coef + (1 - sigma) * x1_coef
        g = self.diffusion_coef(index) * _rows(stochastic, index)
        return delta * (1 + g**2 * (1 - sigma) / (2 * sigma))

    def log_prob_precision(self, index: torch.Tensor) -> torch.Tensor:
        """``c_i`` with ``d log_prob / d mu = c_i (x_{i+1} - mu) / D`` (float64, per sample): ``1 / std^2`` for the
        Gaussian log-density, 2 for CPS's unnormalised one. With ``velocity_coef`` it gives the closed-form
        gradients of a step's log-prob in the velocity (JAGG's ``s_j``, Flash-GRPO's lambda)."""
        if self.noise_kernel == "cps":
            return torch.full_like(self.sigma(index), 2.0)
        delta = self.sigma(index) - self.table(index.device)[index + 1]
        return 1.0 / (self.diffusion_coef(index) ** 2 * delta)

    def _cps_std(self, index: torch.Tensor) -> torch.Tensor:
        """CPS noise std ``sigma_{i+1} sin(a pi / 2)`` (float64; ``std_dev_t`` in upstream)."""
        return self.table(index.device)[index + 1] * math.sin(self.eta * math.pi / 2)

    def _cps_coefs(
        self, index: torch.Tensor, stochastic: torch.Tensor | bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(1 - sigma_{i+1}, sqrt(sigma_{i+1}^2 - std^2), std)`` per sample in float64: the weights of ``x0_hat``
        and ``x1_hat`` in the CPS mean, and the noise std (0 on deterministic rows, whose weights are then Euler's)."""
        sigma_next = self.table(index.device)[index + 1]
        std = self._cps_std(index) * _rows(stochastic, index)
        return 1 - sigma_next, torch.sqrt(sigma_next**2 - std**2), std

    def mean_std(
        self, sample: torch.Tensor, velocity: torch.Tensor, index: torch.Tensor, stochastic: torch.Tensor | bool = True
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and std of ``x_{i+1} | x_i`` in fp32 (fp64 if the inputs are fp64). ``stochastic=False`` rows get
        ``g = 0``, i.e. exactly the ODE Euler step of diffusers' FlowMatchEulerDiscreteScheduler (for every kernel)."""
        dtype = torch.promote_types(velocity.dtype, torch.float32)
        x, v = sample.to(dtype), velocity.to(dtype)
        sigma = self.sigma(index)
        delta = self.table(index.device)[index + 1] - sigma
        if self.noise_kernel == "cps":
            return self._cps_mean_std(x, v, index, sigma, delta, stochastic)
        g = self.diffusion_coef(index) * _rows(stochastic, index)
        a = (g**2 / (2 * sigma)).to(dtype)
        d, s1 = _expand(delta.to(dtype), x), _expand((1 - sigma).to(dtype), x)
        mean = x + d * (v + _expand(a, x) * (x + s1 * v))
        std = (g * torch.sqrt(-delta)).to(dtype)
        return mean, std

    def _cps_mean_std(
        self,
        x: torch.Tensor,
        v: torch.Tensor,
        index: torch.Tensor,
        sigma: torch.Tensor,
        delta: torch.Tensor,
        stochastic: torch.Tensor | bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The CPS mean in upstream's own form (predicted clean sample and noise re-mixed), Euler on deterministic
        rows (upstream's ``noise_level=0`` gives the same up to rounding)."""
        dtype = x.dtype
        x0_coef, x1_coef, std = self._cps_coefs(index, stochastic)
        pred_x0 = x - _expand(sigma.to(dtype), x) * v
        pred_x1 = x + v * _expand((1 - sigma).to(dtype), x)
        mean = pred_x0 * _expand(x0_coef.to(dtype), x) + pred_x1 * _expand(x1_coef.to(dtype), x)
        deterministic = _expand(_rows(stochastic, index) == 0, x)
        mean = torch.where(deterministic, x + _expand(delta.to(dtype), x) * v, mean)
        return mean, std.to(dtype)

    def _log_prob(self, prev_sample: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
        if self.noise_kernel == "cps":
            return cps_log_prob(prev_sample, mean)
        return gaussian_log_prob(prev_sample, mean, std)

    def step(
        self,
        sample: torch.Tensor,
        velocity: torch.Tensor,
        index: torch.Tensor,
        stochastic: torch.Tensor | bool = True,
        noise: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
    ) -> SDEStepOutput:
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
        # CPS's log-prob stays defined where its std is 0 (the last step, sigma_N = 0), as upstream's
        defined = _rows(stochastic, index) > 0 if self.noise_kernel == "cps" else std > 0
        log_prob = torch.where(
            defined, self._log_prob(prev, mean, torch.where(std > 0, std, 1.0)), torch.full_like(std, float("nan"))
        )
        return SDEStepOutput(prev_sample=prev.to(sample.dtype), mean=mean, std=std, log_prob=log_prob)

    def log_prob(
        self, prev_sample: torch.Tensor, sample: torch.Tensor, velocity: torch.Tensor, index: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Recompute ``(log pi(x_{i+1} | x_i), mean)`` for a stochastic step with a (possibly new) velocity."""
        mean, std = self.mean_std(sample, velocity, index, True)
        return self._log_prob(prev_sample, mean, std), mean

    def pred_x0(self, sample: torch.Tensor, velocity: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """Predicted clean sample ``x - sigma v`` (what DanceGRPO decodes at the last step)."""
        return sample - _expand(self.sigma(index).to(sample.dtype), sample) * velocity.to(sample.dtype)
