"""The DiffusionNFT loss (Zheng et al., arXiv:2509.16117: the negative-aware flow-matching objective with adaptive
loss weighting) exactly as the authors' ``scripts/train_nft_sd3.py`` computes it, lines 909-970.

Time runs from data (sigma = 0) to noise (sigma = 1): ``x_sigma = (1 - sigma) x0 + sigma eps`` and the velocity is
``v = dx/dsigma``, so ``x0 = x_sigma - sigma v``.

* optimality weight ``r = 1/2 + clip(A, -c, c) / (2 c)`` with ``c = adv_clip_max`` (their lines 910-929);
* implicit policies ``v+ = beta v + (1 - beta) v_old`` and ``v- = (1 + beta) v_old - beta v`` (lines 934-937);
* each branch is an x0 regression normalised by its own detached mean absolute error, computed in float64 and
  floored at 1e-5 (lines 940-957);
* ``L = c (r L+ + (1 - r) L-) / beta + kl_beta mean ||v - v_ref||^2`` per sample (lines 959-970).
"""

from __future__ import annotations

import torch

from methods.diffusion_nft_config import AdvMode


def optimality_weight(advantages: torch.Tensor, adv_clip_max: float, mode: str = "all") -> torch.Tensor:
    """``r`` in [0, 1] from advantages: clamped to +-adv_clip_max, optionally reshaped (``mode``, their
    ``train.adv_mode``), then mapped linearly so that A = 0 gives r = 1/2."""
    if mode not in tuple(AdvMode):
        raise ValueError(f"adv_mode must be one of {', '.join(AdvMode)}, got {mode!r}")
    a = advantages.clamp(-adv_clip_max, adv_clip_max)
    if mode == "positive_only":
        a = a.clamp(0, adv_clip_max)
    elif mode == "negative_only":
        a = a.clamp(-adv_clip_max, 0)
    elif mode == "one_only":
        a = (a > 0).to(a.dtype)
    elif mode == "binary":
        a = torch.sign(a)
    return ((a / adv_clip_max) / 2.0 + 0.5).clamp(0, 1)


def _per_sample_mean(x: torch.Tensor) -> torch.Tensor:
    return x.mean(dim=tuple(range(1, x.ndim)))


def _normalised_regression(x0_pred: torch.Tensor, x0: torch.Tensor) -> torch.Tensor:
    """``mean (x0_pred - x0)^2 / w`` with ``w = max(mean |x0_pred - x0|, 1e-5)`` detached, per sample."""
    with torch.no_grad():
        w = (x0_pred.double() - x0.double()).abs().mean(dim=tuple(range(1, x0.ndim)), keepdim=True).clamp(min=1e-5)
    return _per_sample_mean((x0_pred - x0) ** 2 / w)


def nft_loss(
    v: torch.Tensor,
    v_old: torch.Tensor,
    x0: torch.Tensor,
    xt: torch.Tensor,
    sigma: torch.Tensor,
    r: torch.Tensor,
    beta: float,
    adv_clip_max: float,
    kl_beta: float = 0.0,
    v_ref: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-sample loss (B,) of the trained velocity ``v`` (differentiable) at noised latents ``xt`` of clean
    latents ``x0`` at noise levels ``sigma`` (B,); ``v_old`` / ``v_ref`` are the sampling and reference policies'
    velocities there (detached here). Returns the loss and detached statistics per sample."""
    s = sigma.to(v.dtype).view(-1, *([1] * (v.ndim - 1)))
    v_old = v_old.detach()
    v_pos = beta * v + (1.0 - beta) * v_old
    v_neg = (1.0 + beta) * v_old - beta * v
    loss_pos = _normalised_regression(xt - s * v_pos, x0)
    loss_neg = _normalised_regression(xt - s * v_neg, x0)
    r = r.to(loss_pos.dtype)
    policy = adv_clip_max * (r * loss_pos + (1.0 - r) * loss_neg) / beta
    stats = {"policy_loss": policy.detach(), "old_deviation": _per_sample_mean((v - v_old) ** 2).detach()}
    loss = policy
    if kl_beta > 0:
        if v_ref is None:
            raise ValueError("kl_beta > 0 needs the reference velocity v_ref")
        kl = _per_sample_mean((v - v_ref.detach()) ** 2)
        loss = loss + kl_beta * kl
        stats["kl"] = kl.detach()
    return loss, stats
