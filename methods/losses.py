"""PPO-clipped GRPO loss and the KL regulariser to the reference policy
(docs/methods/grpo_baselines.md#ppo-loss-and-normalisation, docs/methods/grpo_baselines.md#kl-to-the-reference)."""

from __future__ import annotations

import torch


def ppo_clip_loss(
    log_prob: torch.Tensor, old_log_prob: torch.Tensor, advantages: torch.Tensor, clip_range: float
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-sample ``max(-A rho, -A clip(rho, 1 - eps, 1 + eps))`` with ``rho = exp(l - l_old)``.

    Returns the per-sample loss (B,) and detached statistics: ``ratio``, ``clipped`` (|rho - 1| > eps, as
    Flow-GRPO logs ``clipfrac``) and ``approx_kl`` (``0.5 (l - l_old)^2``, Flow-GRPO's estimator).
    """
    log_ratio = log_prob - old_log_prob.to(log_prob.dtype)
    ratio = torch.exp(log_ratio)
    adv = advantages.to(log_prob.dtype)
    unclipped = -adv * ratio
    clipped = -adv * torch.clamp(ratio, 1.0 - clip_range, 1.0 + clip_range)
    loss = torch.maximum(unclipped, clipped)
    with torch.no_grad():
        stats = {
            "ratio": ratio.detach(),
            "clipped": ((ratio - 1.0).abs() > clip_range).to(log_prob.dtype),
            "approx_kl": 0.5 * log_ratio.detach() ** 2,
        }
    return loss, stats


def kl_to_reference(
    mean: torch.Tensor, ref_mean: torch.Tensor, g: torch.Tensor, exact: bool = False, delta: torch.Tensor | None = None
) -> torch.Tensor:
    """Per-sample KL between the policy's and the reference's Gaussian steps (equal covariances).

    Flow-GRPO computes ``mean_D ||mu - mu_ref||^2 / (2 g^2)`` (``exact=False``); the exact Gaussian KL also divides
    by ``|Delta|`` (``exact=True``), which amounts to a per-step rescaling of beta.
    """
    sq = ((mean - ref_mean.to(mean.dtype)) ** 2).flatten(1).mean(1)
    denom = 2 * g.to(mean.dtype) ** 2
    if exact:
        if delta is None:
            raise ValueError("exact KL needs the step size delta")
        denom = denom * delta.abs().to(mean.dtype)
    return sq / denom
