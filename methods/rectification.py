"""Temporal gradient rectification of Flash-GRPO (docs/methods/flash_grpo.md#temporal-gradient-rectification).

The gradient of a one-step SDE log-prob with respect to the predicted velocity is ``-lambda(t) xi / D``:
the step's discretisation puts an implicit weight ``lambda(t_k)`` on every sample trained at step k, unrelated to
how informative the sample is. Flash-GRPO multiplies each sample's clipped objective by ``w = (1/lambda) / mean(1/lambda)``
so every prompt contributes on equal terms whatever its SDE step, with the average weight 1 (learning rate unchanged).

``lambda`` is always computed from the sampler's own sigmas and noise kernel (never a hard-coded table):
``lambda = |d mu / d v| / s = Delta (1 + sigma_t^2 (1 - t) / (2 t)) / (sigma_t sqrt(Delta))``. Under Flow-GRPO's CPS
kernel the log-prob is the unnormalised ``-mean ||x_{k+1} - mu||^2`` (docs/cps.md), whose gradient is
``-lambda xi / D`` with ``lambda = 2 s |d mu / d v|``: the same identity, so the weights still equalise the samples'
implicit step weights (an extension of the paper, which only uses the linear Wan kernel).
"""

from __future__ import annotations

import torch

from methods.flash_grpo_config import WeightNorm
from methods.sde import FlowSDEScheduler
from rewardflow.distributed import all_reduce_sum


def rectification_factor(sde: FlowSDEScheduler, index: torch.Tensor) -> torch.Tensor:
    """``lambda(t_k)`` (float64) for step indices ``index`` (B,): ``d log_prob / d v = -lambda xi / D``, from the
    sampler's sigmas, its ``g`` and its log-prob convention.

    Gaussian kernels: ``sqrt(Delta) / sigma_t + sigma_t sqrt(Delta) (1 - t) / (2 t)``; ``velocity_coef`` is the signed
    ``d mu / d v`` (negative, since ``Delta`` is taken as ``sigma_{k+1} - sigma_k`` there) and ``log_prob_precision``
    is ``1 / s^2``, so this is ``|d mu / d v| / s``. CPS: ``2 s |d mu / d v|``.
    """
    sigma = sde.sigma(index)
    delta = sigma - sde.table(index.device)[index + 1]
    std = sde.diffusion_coef(index) * torch.sqrt(delta)
    return -sde.velocity_coef(index) * sde.log_prob_precision(index) * std


def rectification_weights(
    inv_lambda: torch.Tensor, norm: str, pool_inv_lambda: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample weights ``w = (1/lambda) / denominator`` for the samples of one optimizer update on this rank.

    Args:
        inv_lambda: ``1/lambda`` of this rank's samples of the update (float64).
        norm: ``update`` (official code): the mean of ``1/lambda`` over the whole update *across
            ranks*, so the weights average to exactly 1 over the update; ``pool``: the mean over the candidate
            SDE steps (UniRL's choice; equal in expectation for uniform draws); ``none``: raw ``1/lambda``
            (changes the effective learning rate, ~5.6x for Wan-20).
        pool_inv_lambda: ``1/lambda`` of every step of the SDE pool (``norm="pool"``).

    Returns ``(weights, denominator)``, both tensors on ``inv_lambda``'s device (nothing is read back to the host).
    Collective when ``norm="update"``: every rank must call it for every update.
    """
    if norm == "update":
        # filled on the device: torch.tensor of a Python number would be a host copy (a sync on CUDA)
        count = torch.full((), float(inv_lambda.numel()), dtype=inv_lambda.dtype, device=inv_lambda.device)
        totals = all_reduce_sum(torch.stack([inv_lambda.sum(), count]))  # on the rollout's device (NCCL-safe)
        denom = totals[0] / totals[1]
    elif norm == "pool":
        if pool_inv_lambda is None:
            raise ValueError("norm='pool' needs the pool's 1/lambda values")
        denom = pool_inv_lambda.to(inv_lambda.device, inv_lambda.dtype).mean()
    elif norm == "none":
        denom = torch.ones((), dtype=inv_lambda.dtype, device=inv_lambda.device)
    else:
        raise ValueError(f"weight norm must be one of {', '.join(WeightNorm)}, got {norm!r}")
    return inv_lambda / denom, denom
