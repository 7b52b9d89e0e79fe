"""The optimizer updates of one step, with one host sync per update (docs/performance.md#one-host-sync-per-update).

Inside an update nothing is read back to the host: the method's ``backward`` returns its statistic sums as device
tensors, which are added up on the device; the gradient norm stays a tensor. Once per update one small tensor holds
the joint skip flag (a non-finite loss or gradient on any rank) and the gradient norm, and reading it is the
update's only sync, which the branch (step or skip) needs. The kept updates' statistics are summed over ranks and
read back once per step. On an accelerator this lets the host queue the next transformer call while the device
still runs the previous one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch

from methods.update_rows import add_sums
from rewardflow.distributed import all_reduce_sum, collective_device

log = logging.getLogger(__name__)


def _collective(t: torch.Tensor) -> torch.Tensor:
    """``t`` (computed on the compute device) on the collectives' device. They are the same device (NCCL and CUDA,
    gloo and the CPU), so this moves nothing; a move there would be a host copy, a sync on CUDA."""
    device = collective_device()
    return t if t.device == device else t.to(device)


class UpdateLoop:
    """Runs ``method.update_plan``'s updates: backward of every chunk, clip, step (or skip), zero the gradients.

    Args:
        method: the method (:class:`methods.base.Method`).
        optimizer: built over ``params``.
        params: the trainable parameters (possibly DTensors under FSDP2).
        max_grad_norm: clip the global gradient norm to this (0: no clipping, the norm is still logged).
        after_step: called after every optimizer step that was taken (e.g. the EMA of the weights follows it).
    """

    def __init__(
        self,
        method,
        optimizer: torch.optim.Optimizer,
        params: list[torch.nn.Parameter],
        max_grad_norm: float,
        after_step: Callable[[], None] | None = None,
    ):
        self.method, self.optimizer, self.params = method, optimizer, params
        self.max_grad_norm = float(max_grad_norm)
        self.after_step = after_step

    def run(self, rollout, generator: torch.Generator) -> tuple[int, dict[str, float]]:
        """All optimizer updates of one rollout; returns (number of skipped updates, averaged statistics).

        Statistics are per-sample sums on each rank, summed over the kept updates and over ranks and divided by the
        number of samples; the skip decision is joint, so sharded parameters never diverge between ranks.
        """
        sums: dict[str, torch.Tensor] = {}
        norms: list[float] = []
        n_samples, skipped = 0, 0
        for index, update in enumerate(self.method.update_plan(rollout, generator)):
            self.method.on_update_start(index)
            update_size = sum(len(chunk) for chunk in update)
            stats: dict[str, torch.Tensor] = {}
            for chunk in update:
                add_sums(stats, self.method.backward(rollout, chunk, update_size))
            norm = self.grad_norm()
            bad = ~torch.isfinite(norm)
            if "loss" in stats:
                bad = bad | ~torch.isfinite(stats["loss"])  # both on the compute device
            flag, norm_value = self._joint(bad, norm)  # the update's one host sync
            if flag:
                skipped += 1
                log.warning("non-finite loss or gradient (grad norm %s); optimizer step skipped", norm_value)
                self.optimizer.zero_grad(set_to_none=True)
                continue
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            if self.after_step is not None:
                self.after_step()
            norms.append(norm_value)
            n_samples += update_size
            add_sums(sums, stats)
        keys = sorted(sums)
        on = sums[keys[0]].device if keys else collective_device()
        # the count is filled on the device (a torch.tensor of a Python number would be a host copy, a sync)
        count = torch.full((), float(n_samples), dtype=torch.float64, device=on)
        values = _collective(torch.stack([sums[k].to(torch.float64) for k in keys] + [count]))
        totals = all_reduce_sum(values).tolist()  # the step's statistics sync
        out = {k: v / max(totals[-1], 1.0) for k, v in zip(keys, totals[:-1])}
        if norms:
            out["grad_norm"] = sum(norms) / len(norms)
        return skipped, out

    def grad_norm(self) -> torch.Tensor:
        """Global gradient norm (over all ranks' shards) before clipping, as a device tensor; clips when
        ``max_grad_norm`` > 0 (``clip_grad_norm_`` scales on the device, whatever the norm)."""
        grads = [p for p in self.params if p.grad is not None]
        if not grads:
            return torch.zeros((), device=collective_device())
        if self.max_grad_norm > 0:
            norm = torch.nn.utils.clip_grad_norm_(grads, self.max_grad_norm)
        else:
            norm = torch.nn.utils.get_total_norm([p.grad for p in grads])
        if hasattr(norm, "full_tensor"):  # DTensor under FSDP2
            norm = norm.full_tensor()
        return norm

    @staticmethod
    def _joint(bad: torch.Tensor, norm: torch.Tensor) -> tuple[bool, float]:
        """``(skip on every rank, grad norm)`` from one tensor read: the flag counts the ranks with a non-finite loss
        or gradient (one makes every rank skip); the norm is already global."""
        ranks_bad = all_reduce_sum(_collective(bad.to(torch.float64).reshape(1)))
        flag, value = torch.cat([ranks_bad, _collective(norm.detach().to(torch.float64).reshape(1))]).tolist()
        return flag > 0, value
