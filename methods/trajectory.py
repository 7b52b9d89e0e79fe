"""The sampled states ``x_0 .. x_N`` of a rollout, keeping only those the update reads (docs/memory.md).

A method that knows its trained transitions before sampling (Flow-GRPO, Flow-GRPO-Fast, Flash-GRPO, JAGG) stores,
per sample, only the states ``x_i`` and ``x_{i+1}`` of its trained transitions ``i``; DanceGRPO draws them after
sampling and keeps every state. The states keep the dtype they were sampled in (fp32, float64 for the SOC toy:
log-probs are recomputed from them, so they are never rounded), on the device or, with
``method.trajectory_offload=true``, in pinned host memory, copied back per micro-batch.

Reads look like indexing a ``(B, N + 1, *latent)`` tensor: ``trajectory[samples, index]`` with broadcastable long
tensors, as :meth:`methods.grpo.GRPO.step_loss` does.
"""

from __future__ import annotations

import torch


def transition_states(steps: torch.Tensor | None, num_states: int) -> torch.Tensor | None:
    """(B, N + 1) bool: the states that trained transitions ``steps`` (B, T) read (``x_i`` and ``x_{i+1}``);
    None (every state) when the steps are not known yet."""
    if steps is None:
        return None
    keep = torch.zeros(steps.shape[0], num_states, dtype=torch.bool)
    rows = torch.arange(steps.shape[0])[:, None]
    keep[rows, steps.cpu()] = True
    keep[rows, steps.cpu() + 1] = True
    return keep


class Trajectory:
    """States of ``batch`` samples at ``num_states`` times, of which ``keep`` (B, num_states) bool are stored."""

    def __init__(
        self,
        batch: int,
        num_states: int,
        state_shape: tuple[int, ...],
        dtype: torch.dtype,
        device: torch.device,
        keep: torch.Tensor | None = None,
        offload: bool = False,
    ):
        keep = torch.ones(batch, num_states, dtype=torch.bool) if keep is None else keep.cpu()
        self.keep = keep
        self.slot = torch.where(keep, keep.long().cumsum(1) - 1, -1)  # state -> column of self.states
        self.device = torch.device(device)
        # the update indexes with device tensors: a device copy of the table reads states without a host sync
        self._device_slot = self.slot.to(self.device)
        pin = offload and self.device.type == "cuda"
        store = torch.device("cpu") if pin else self.device
        width = int(keep.sum(1).max()) if batch else 0
        self.states = torch.empty((batch, width, *state_shape), dtype=dtype, device=store, pin_memory=pin)
        self.shape = torch.Size((batch, num_states, *state_shape))
        self.dtype = dtype

    @property
    def nbytes(self) -> int:
        return self.states.numel() * self.states.element_size()

    def record(self, i: int, x: torch.Tensor) -> None:
        """Store state ``i`` of every sample that keeps it."""
        rows = self.keep[:, i].nonzero().flatten()
        if rows.numel() == 0:
            return
        dst = self.states.device
        self.states[rows.to(dst), self.slot[rows, i].to(dst)] = x[rows.to(x.device)].to(dst, non_blocking=True)

    def __getitem__(self, key) -> torch.Tensor:
        if not (isinstance(key, tuple) and len(key) == 2 and not any(isinstance(k, slice) for k in key)):
            return self.full()[key]  # plain tensor indexing when every state was kept
        table = self._device_slot
        samples, index = (torch.as_tensor(k, dtype=torch.long).to(table.device) for k in key)
        samples, index = torch.broadcast_tensors(samples, index)
        slots = table[samples, index]
        # checked on the device, not read back: no host sync in the update (docs/performance.md)
        torch._assert_async(
            (slots >= 0).all(),
            "a trained transition reads a state the rollout did not keep: the method's "
            "select_train_steps disagrees with the steps it announced before sampling",
        )
        dst = self.states.device
        return self.states[samples.to(dst), slots.to(dst)].to(self.device, non_blocking=True)

    def state(self, i: int, samples: torch.Tensor | None = None) -> torch.Tensor:
        """State ``i`` of ``samples`` (default: every sample)."""
        samples = torch.arange(self.shape[0]) if samples is None else samples
        return self[samples, torch.full_like(torch.as_tensor(samples), int(i))]

    def full(self) -> torch.Tensor:
        """Every state as one (B, N + 1, *latent) tensor (only when all were kept; for tests and diagnostics)."""
        if not bool(self.keep.all()):
            raise ValueError("this trajectory kept only the states its trained transitions read")
        return self.states.to(self.device)
