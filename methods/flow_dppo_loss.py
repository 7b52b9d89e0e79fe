"""Flow-DPPO's masked policy loss and the pieces of its trust region (arXiv:2606.11025; docs/methods/flow_dppo.md).

Both transitions of a step are Gaussians with the same std ``sigma_t``, so the divergence of the current policy from
the rollout policy is exact: ``KL = ||mu_theta - mu_old||^2 / (2 sigma_t^2)`` (paper Eq. 14), here averaged over the
latent's elements as the authors' code does. A row's ``-A rho`` is dropped only when that KL is at least the
threshold and the update still moves away from the rollout policy in the advantage's direction (paper Eq. 18).
Pinned to ``_flowdppo_kl_adv_loss`` and ``FlowDPPO._compute_sigma_t`` of Tencent-Hunyuan/UniRL @1a7b501
(tests/test_flow_dppo.py)."""

from __future__ import annotations

import numpy as np
import torch

from methods.flow_dppo_config import KLStd
from methods.sde import FlowSDEScheduler


def dppo_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    mean: torch.Tensor,
    old_mean: torch.Tensor,
    sigma_t: torch.Tensor,
    threshold: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-row loss (m,) ``-A rho``, 0 on the dropped rows, and its detached statistics.

    ``mean`` / ``old_mean`` (m, *latent) are the step's transition means under the current and the rollout policy,
    ``sigma_t`` (m,) the std the KL divides by (:func:`kl_sigma`). The mask carries no gradient, so the loss is
    differentiable through ``log_prob`` only. Statistics: ``ratio``, ``clipped`` (the dropped rows, logged as
    ``policy/clip_frac``), ``approx_kl``, and ``dppo/kl_old`` (the KL) and ``dppo/kl_high_frac`` (KL >= threshold)."""
    dtype = log_prob.dtype
    adv = advantages.to(dtype).detach()
    log_ratio = log_prob - old_log_prob.to(dtype)
    ratio = torch.exp(log_ratio)
    with torch.no_grad():
        drift = (mean.detach() - old_mean.to(mean.dtype)).pow(2).flatten(1).mean(1).to(dtype)
        kl = drift / (2 * sigma_t.to(dtype) ** 2)
        high = kl >= threshold
        drop = high & (((ratio > 1.0) & (adv > 0)) | ((ratio < 1.0) & (adv < 0)))
    # torch.where, not a product with the mask: an overflowed ratio on a dropped row gives 0, not inf x 0 = NaN
    loss = torch.where(drop, torch.zeros((), dtype=dtype, device=ratio.device), -adv * ratio)
    stats = {
        "ratio": ratio.detach(),
        "clipped": drop.to(dtype),
        "approx_kl": 0.5 * log_ratio.detach() ** 2,
        "dppo/kl_old": kl,
        "dppo/kl_high_frac": high.to(dtype),
    }
    return loss, stats


def kl_sigma(sde: FlowSDEScheduler, index: torch.Tensor, kind: KLStd | str) -> torch.Tensor:
    """``sigma_t`` (float64, per row of ``index``) of ``method.kl_std``: the step's own std ``g sqrt(-Delta)``;
    UniRL's ``eta sqrt(sigma / (1 - min(sigma, 0.99))) sqrt(-Delta)`` whatever the kernel (it differs from the flow
    kernel's std only where ``sigma > 0.99``); or 1."""
    sigma = sde.sigma(index)
    neg_delta = sigma - sde.table(index.device)[index + 1]
    if kind == KLStd.step:
        return sde.diffusion_coef(index) * torch.sqrt(neg_delta)
    if kind == KLStd.unirl:
        return sde.eta * torch.sqrt(sigma / (1.0 - sigma.clamp(max=0.99))) * torch.sqrt(neg_delta)
    return torch.ones_like(sigma)


def sde_step_draw(iteration: int, sampling_steps: int, count: int, first: int, stop: int) -> list[int]:
    """The SDE (= trained) steps of training iteration ``iteration``: ``count`` distinct steps of ``[first, stop)``,
    sorted, drawn by ``numpy.random.default_rng(iteration)`` as ``AllSDEScheduler.get_sde_indices`` does (the same
    for every sample and rank, and for every run whatever its seed)."""
    pool = list(range(first, stop))
    if count >= len(pool):
        return pool
    chosen = np.random.default_rng(int(iteration)).choice(pool, size=count, replace=False)
    return sorted(int(i) for i in chosen)
