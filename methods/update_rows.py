"""Batched trained steps (docs/performance.md#batched-trained-steps).

An update trains rows: one (sample, trained step) pair each (a GRPO transition, a JAGG endpoint, an EAM / AM loss
time, a DiffusionNFT time). Every family's ``velocity`` takes a timestep per row, so rows of different samples and
different steps share one transformer call. ``method.update_batch`` is how many transformer rows one call of the
update holds, CFG rows counted (a sample with true CFG costs 2 rows: ``[uncond, cond]`` in one forward). Each call's
loss is summed over its rows and back-propagated at once; the update's gradient is the sum over its rows whatever
the packing, so it equals the row-at-a-time path (tests/test_update_batch.py), while FSDP2 gathers every block once
per call instead of once per row and the launch and Python overhead is paid per call.
"""

from __future__ import annotations

import torch

from models.backbone import Backbone


def rows_per_call(update_batch: int, backbone: Backbone) -> int:
    """Trained rows per transformer call: ``update_batch`` transformer rows, at least one trained row."""
    return max(1, int(update_batch) // max(1, backbone.rows_per_sample))


def trained_rows(samples: torch.Tensor, steps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The rows of ``samples`` (m,) at their trained columns ``steps`` (m, C), sample by sample: ``(sample (m C,),
    step (m C,))``."""
    return samples.repeat_interleave(steps.shape[1]), steps.reshape(-1)


def row_calls(n_rows: int, per_call: int) -> list[slice]:
    """Consecutive slices of at most ``per_call`` rows covering ``n_rows`` rows."""
    return [slice(start, min(start + per_call, n_rows)) for start in range(0, n_rows, max(1, per_call))]


def add_sums(totals: dict[str, torch.Tensor], sums: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Add statistic sums into ``totals`` as float64 tensors on their device: no value is read back to the host
    inside the update (docs/performance.md#one-host-sync-per-update)."""
    for key, value in sums.items():
        value = value.detach().to(torch.float64)
        totals[key] = totals[key] + value if key in totals else value
    return totals
