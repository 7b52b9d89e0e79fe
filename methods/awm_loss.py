"""The AWM loss (Xue et al., arXiv:2509.25050; docs/methods/awm.md#equations) as the authors' code computes it
(scxue/advantage_weighted_matching @be51372, ``scripts/train_sd3_awm.py``: ``compute_log_prob_awm``, lines 210-252,
and the update, lines 1265-1354), per (sample, trained time) row.

Time runs from data (sigma = 0) to noise (sigma = 1): ``x_sigma = (1 - sigma) x0 + sigma eps``, and the model's
velocity targets ``eps - x0``. Per row, in float64:

* the flow-matching error ``e = mean (v - (eps - x0))^2`` and its log-likelihood surrogate ``log p = -w(e, sigma)``
  (``weighting``: their ``ghuber`` is ``((e + 1e-10)^p - 1e-10^p) sigma / p``);
* the advantage ``A = clip(adv, -c, c) / c x a_max``;
* the policy loss ``max(-A rho, -A clip(rho, 1 - eps, 1 + eps))``, ``rho = exp(log p - log p_old)``: on policy
  ``log p_old`` is ``log p`` detached (rho = 1, the gradient is ``-A grad log p``: the advantage-weighted matching
  loss), off policy the EMA policy's;
* plus ``kl_beta mean (v - v_ref)^2`` and ``ema_kl_beta mean (v - v_ema)^2`` (each optionally ELBO-weighted).

The mean of these rows over an update is their loss; their code averages over the rows of one micro-batch and over
the micro-batches of the step (gradient accumulation), which is the same mean.
"""

from __future__ import annotations

import torch

from methods.awm_config import KLWeight, Weighting

#: their floor inside the Huber weightings (train_sd3_awm.py:247, 249)
HUBER_EPS = 1e-10


def _per_row_mean(x: torch.Tensor) -> torch.Tensor:
    return x.mean(dim=tuple(range(1, x.ndim)))


def matching_log_prob(
    v: torch.Tensor,
    noise: torch.Tensor,
    x0: torch.Tensor,
    sigma: torch.Tensor,
    weighting: str = Weighting.ghuber,
    ghuber_power: float = 0.25,
) -> torch.Tensor:
    """``log p`` (r,) float64: minus the weighted flow-matching error of velocities ``v`` (r, *latent) at rows
    noised with ``noise`` from ``x0`` at levels ``sigma`` (r,)."""
    if weighting not in tuple(Weighting):
        raise ValueError(f"weighting must be one of {', '.join(Weighting)}, got {weighting!r}")
    e = _per_row_mean((v.double() - (noise.double() - x0.double())) ** 2)
    t = sigma.to(torch.float64).reshape(-1)
    if weighting == Weighting.uniform:
        return -e
    if weighting == Weighting.t:
        return -e * t
    if weighting == Weighting.t2:
        return -e * t**2
    if weighting == Weighting.huber:
        return -(torch.sqrt(e + HUBER_EPS) - 1e-5) * t
    p = float(ghuber_power)
    return -((e + HUBER_EPS) ** p - HUBER_EPS**p) * t / p


def scaled_advantages(advantages: torch.Tensor, adv_clip_max: float, advantage_max: float) -> torch.Tensor:
    """``clip(A, -c, c) / c x a_max`` (train_sd3_awm.py:1293-1299)."""
    return advantages.clamp(-adv_clip_max, adv_clip_max) / adv_clip_max * advantage_max


def kl_term(
    v: torch.Tensor, v_other: torch.Tensor, sigma: torch.Tensor, weight: str = KLWeight.uniform
) -> torch.Tensor:
    """Per-row ``mean (v - v')^2`` in float64, divided by ``2 s^2`` with ``s = 0.7 sqrt(sigma / (1 - min(sigma,
    0.99)))`` for ``ELBO`` (train_sd3_awm.py:236, 1334-1348)."""
    if weight not in tuple(KLWeight):
        raise ValueError(f"kl weight must be one of {', '.join(KLWeight)}, got {weight!r}")
    kl = _per_row_mean((v.double() - v_other.detach().double()) ** 2)
    if weight == KLWeight.elbo:
        s = sigma.to(torch.float64).reshape(-1)
        std = torch.sqrt(s / (1 - torch.clamp(s, 0, 0.99))) * 0.7
        kl = kl / (2 * std**2)
    return kl


def awm_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    clip_range: float,
    kl: torch.Tensor | None = None,
    kl_beta: float = 0.0,
    ema_kl: torch.Tensor | None = None,
    ema_kl_beta: float = 0.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-row loss (r,) from ``log p`` (differentiable), ``log p_old``, the scaled advantages
    (:func:`scaled_advantages`) and the KL terms of :func:`kl_term`; returns it with detached statistics."""
    adv = advantages.to(log_prob.dtype)
    ratio = torch.exp(log_prob - old_log_prob.detach().to(log_prob.dtype))
    unclipped = -adv * ratio
    clipped = -adv * torch.clamp(ratio, 1.0 - clip_range, 1.0 + clip_range)
    policy = torch.maximum(unclipped, clipped)
    loss = policy
    stats = {
        "policy_loss": policy.detach(),
        "matching_loss": -log_prob.detach(),
        "ratio": ratio.detach(),
        "clipped": ((ratio.detach() - 1.0).abs() > clip_range).to(log_prob.dtype),
    }
    if kl_beta > 0:
        if kl is None:
            raise ValueError("kl_beta > 0 needs the reference KL term")
        loss = loss + kl_beta * kl
        stats["kl_ref"] = kl.detach()
    if ema_kl_beta > 0:
        if ema_kl is None:
            raise ValueError("ema_kl_beta > 0 needs the EMA policy's KL term")
        loss = loss + ema_kl_beta * ema_kl
        stats["kl_ema"] = ema_kl.detach()
    return loss, stats
