"""Per-component score normalisation for weighted multi-rewards.

Preference rewards live on unrelated scales (HPSv2.1 cosines move by ~0.01, raw PickScore by ~1), so in a raw
weighted sum the component with the largest spread dominates whatever the weights say. Standardising each
component first makes the weights mean relative importance:

* ``none``: the raw score.
* ``batch``: z-score over the scores of this call (the step's samples), as GRPO does for advantages; needs at least
  2 samples per call.
* ``running``: z-score with an exponential moving mean and variance (``momentum`` per call), which is defined for
  any batch size, so adjoint methods that score small micro-batches can use it. The statistics are buffers, so they
  are saved and restored with the reward's state dict.

Statistics are constants for gradients (computed on detached scores): the gradient of a component is its raw
gradient divided by its spread. They are summed over ranks when ``torch.distributed`` is initialised, so every
rank applies the same transform; this makes a call a collective, which holds for the trainer's once-per-step
scoring on every rank.
"""

from __future__ import annotations

import torch
from torch import nn

from rewardflow.distributed import all_reduce_sum
from rewards.multi_config import Normalization


class ScoreNormalizer(nn.Module):
    def __init__(self, mode: str = "none", momentum: float = 0.05, eps: float = 1e-6):
        super().__init__()
        if mode not in tuple(Normalization):
            raise ValueError(f"normalize must be one of {', '.join(Normalization)} (got {mode!r})")
        if not 0 < momentum <= 1:
            raise ValueError(f"norm_momentum must be in (0, 1] (got {momentum})")
        self.mode, self.momentum, self.eps = mode, momentum, eps
        self.register_buffer("mean", torch.zeros((), dtype=torch.float64))
        self.register_buffer("var", torch.ones((), dtype=torch.float64))
        self.register_buffer("initialized", torch.zeros((), dtype=torch.bool))

    def _batch_stats(self, scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
        x = scores.detach().double().flatten()
        totals = all_reduce_sum(torch.stack([x.new_tensor(x.numel()), x.sum(), (x * x).sum()]))
        n = int(totals[0])
        mean = totals[1] / n
        return mean, (totals[2] / n - mean * mean).clamp_min(0.0), n

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        if self.mode == "none":
            return scores
        mean, var, n = self._batch_stats(scores)
        if self.mode == "batch":
            if n < 2:
                raise ValueError("normalize=batch needs at least 2 samples per reward call. Fix: normalize=running")
        else:
            with torch.no_grad():
                rate = self.momentum if bool(self.initialized) else 1.0
                self.mean.lerp_(mean, rate)
                if n >= 2:  # a single score says nothing about the spread
                    self.var.lerp_(var, rate)
                self.initialized.fill_(True)
            mean, var = self.mean, self.var
        std = var.sqrt().clamp_min(self.eps)
        return (scores - mean.to(scores.dtype)) / std.to(scores.dtype)
