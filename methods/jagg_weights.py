"""JAGG's interpolation weights and the folding of per-step upstream gradients into two
(docs/methods/jagg.md#one-jagg-group).

Within a group of W steps with times t_0 > ... > t_{W-1}, JAGG replaces the parameter-Jacobian of step j by
``(1 - alpha_j) J_0 + alpha_j J_{W-1}`` with t-weighted ``alpha_j = (t_0 - t_j) / (t_0 - t_{W-1})``, so the group's
gradient ``sum_j J_j^T s_j`` becomes ``J_0^T s_base + J_{W-1}^T s_corr``: two backward passes instead of W.
"""

from __future__ import annotations

import torch

from methods.jagg_config import Ablation


def time_weights(times: torch.Tensor) -> torch.Tensor:
    """t-weighted ``alpha``: ``times`` (W, m) per step and row -> (W, m) with alpha_0 = 0, alpha_{W-1} = 1.

    Exact when the velocity is affine in (z, t) and the states lie on the same t-weighted line (Theorem 1,
    docs/methods/jagg.md#the-gradient-identity-and-theorem-1). The endpoints' times must differ (JAGG checks its
    schedule once when it is built, so nothing is read back to the host here, inside the update).
    """
    return (times[0] - times) / (times[0] - times[-1])


def index_weights(
    window: int, rows: int, dtype: torch.dtype = torch.float64, device: torch.device | None = None
) -> torch.Tensor:
    """The prototype's index-uniform ``alpha_j = j / (W - 1)``; not exact on a shifted schedule (Theorem 1, d)."""
    return torch.linspace(0, 1, window, dtype=dtype, device=device).unsqueeze(1).expand(window, rows)


def endpoint_weights(alpha: torch.Tensor, ablation: str = "none") -> tuple[torch.Tensor, torch.Tensor]:
    """Weights ``(w_base, w_corr)`` (W, m) of each step's upstream gradient on the two endpoints.

    Args:
        alpha: (W, m) interpolation weights.
        ablation: ``none`` (JAGG: 1 - alpha, alpha); ``endpoints_only`` (s_0 on the first endpoint and s_{W-1} on the
            last, the intermediate steps dropped: the same cost as JAGG, equivalent to training 2 of the W steps);
            ``nearest_endpoint`` (alpha rounded to {0, 1}; alpha = 0.5 goes to the last endpoint). Both ablations are
            readings of the paper's "endpoint backward without interpolation" (definition unconfirmed:
            docs/methods/jagg.md#reconstructed-or-unconfirmed-choices).
    """
    if ablation == "none":
        return 1 - alpha, alpha
    if ablation == "nearest_endpoint":
        hard = (alpha >= 0.5).to(alpha.dtype)
        return 1 - hard, hard
    if ablation == "endpoints_only":
        first, last = torch.zeros_like(alpha), torch.zeros_like(alpha)
        first[0], last[-1] = 1, 1
        return first, last
    raise ValueError(f"ablation must be one of {', '.join(Ablation)}, got {ablation!r}")


def aggregate(upstream: torch.Tensor, w_base: torch.Tensor, w_corr: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``s_base = sum_j w_base_j s_j``, ``s_corr = sum_j w_corr_j s_j`` (step 4 of docs/methods/jagg.md#one-jagg-group).

    Args:
        upstream: (W, m, *latent) per-step upstream gradients ``s_j = dL_j / dv_j``.
        w_base, w_corr: (W, m) weights from :func:`endpoint_weights`.
    """
    shape = (*w_base.shape, *([1] * (upstream.dim() - 2)))
    w_base, w_corr = w_base.to(upstream.dtype).reshape(shape), w_corr.to(upstream.dtype).reshape(shape)
    return (w_base * upstream).sum(0), (w_corr * upstream).sum(0)
