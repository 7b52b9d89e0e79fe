"""The first-update ratio health metric of the GRPO methods (docs/metrics.md#first-update-ratios).

Before the first optimizer step of a rollout the policy is the one that sampled it, so every importance ratio
``rho = exp(log p_new - log p_old)`` of the first update is 1 in exact arithmetic: ``|rho - 1|`` there is pure
rollout-vs-update numerical drift (dtype, attention backend, compile, and in bf16 the different GEMM shapes of a
rollout call and an update call). With the PPO clip at 1e-4 (DanceGRPO, Flow-GRPO) a drift of that size clips
samples that no update has moved, i.e. trains on rounding. This probe measures it on every step:

* ``health/first_update_ratio_dev_mean`` and ``..._max``: exact, over every trained row of the first update on all
  ranks;
* ``..._p50``, ``..._p90``, ``..._p99``: from a histogram of quarter-decade bins (1e-9 .. 1) summed over ranks, each
  reported as its bin's upper edge (an upper bound within a factor 10^0.25);
* ``health/first_update_clip_frac``: the share of those rows with ``|rho - 1| > method.clip_range``.

Everything stays on the device while the update runs and is read back once, after it (``Method.step_metrics``).
"""

from __future__ import annotations

import logging

import torch

from rewardflow.distributed import all_gather_cat, all_reduce_sum, collective_device

log = logging.getLogger(__name__)

#: histogram bin edges of |rho - 1|: 1e-9 .. 1 in quarter decades; below the first edge (zero included) is bin 0
EDGES = torch.logspace(-9, 0, 37, dtype=torch.float64)
QUANTILES = (0.5, 0.9, 0.99)


class FirstUpdateRatios:
    """Collects ``|rho - 1|`` of the rows trained while :attr:`active` (the rollout's first update).

    Args:
        clip_range: the PPO epsilon (a row counts as clipped when ``|rho - 1| > clip_range``).
        warn_above: warn once per run when the first update's clipped share exceeds this (0 or less: never).
        hint: the fix the warning names.
    """

    def __init__(self, clip_range: float, warn_above: float, hint: str):
        self.clip_range, self.warn_above, self.hint = float(clip_range), float(warn_above), hint
        self.active = False
        self._warned = False
        self._edges: torch.Tensor | None = None
        self._reset()

    def _reset(self) -> None:
        self.hist: torch.Tensor | None = None  # (bins,) float64 counts on the compute device
        self.sums: torch.Tensor | None = None  # (rows, clipped rows, sum of |rho - 1|)
        self.peak: torch.Tensor | None = None  # max |rho - 1|

    def add(self, ratio: torch.Tensor) -> None:
        """Add the rows of one loss call (``ratio`` (m,)); a no-op outside the first update."""
        if not self.active or ratio.numel() == 0:
            return
        dev = (ratio.detach().to(torch.float64) - 1.0).abs()
        dev = torch.nan_to_num(dev, nan=float("inf"))  # a NaN ratio is the worst drift, not a missing row
        if self._edges is None or self._edges.device != dev.device:  # made there, not copied (a sync on CUDA)
            self._edges = torch.logspace(-9, 0, len(EDGES), dtype=torch.float64, device=dev.device)
        edges = self._edges
        hist = torch.zeros(len(edges) + 1, dtype=torch.float64, device=dev.device)
        hist.scatter_add_(0, torch.bucketize(dev, edges), torch.ones_like(dev))  # no sync, unlike bincount
        sums = torch.stack([torch.ones_like(dev).sum(), (dev > self.clip_range).to(torch.float64).sum(), dev.sum()])
        peak = dev.max()
        if self.hist is None:
            self.hist, self.sums, self.peak = hist, sums, peak
        else:
            assert self.sums is not None and self.peak is not None
            self.hist, self.sums, self.peak = self.hist + hist, self.sums + sums, torch.maximum(self.peak, peak)

    def flush(self) -> dict[str, float]:
        """The step's metrics (every rank must call it: the counts are summed over ranks); starts the next step."""
        if self.hist is None:
            return {}
        assert self.sums is not None and self.peak is not None
        device = collective_device()
        packed = all_reduce_sum(torch.cat([self.sums, self.hist]).to(device))
        peak = all_gather_cat(self.peak.reshape(1).to(device)).max()
        values = torch.cat([packed, peak.reshape(1)]).tolist()  # the metric's one read-back
        self._reset()
        n, clipped, total = values[0], values[1], values[2]
        hist, peak_value = values[3:-1], values[-1]
        if n <= 0:
            return {}
        out = {
            "health/first_update_ratio_dev_mean": total / n,
            "health/first_update_ratio_dev_max": peak_value,
            "health/first_update_clip_frac": clipped / n,
        }
        for q in QUANTILES:
            out[f"health/first_update_ratio_dev_p{round(100 * q)}"] = _quantile_edge(hist, q * n)
        frac = out["health/first_update_clip_frac"]
        if self.warn_above > 0 and frac > self.warn_above and not self._warned:
            self._warned = True
            log.warning(
                "%.1f%% of the first update's rows are clipped before any optimizer step (max |ratio - 1| = %.2e, "
                "method.clip_range=%.0e): the rollout's and the update's numerics differ. %s",
                100 * frac,
                peak_value,
                self.clip_range,
                self.hint,
            )
        return out


def _quantile_edge(hist: list[float], rank: float) -> float:
    """The upper edge of the first bin whose cumulative count reaches ``rank`` (the last bin: infinity)."""
    edges = EDGES.tolist()
    seen = 0.0
    for k, count in enumerate(hist):
        seen += count
        if seen >= rank:
            return edges[k] if k < len(edges) else float("inf")
    return float("inf")
