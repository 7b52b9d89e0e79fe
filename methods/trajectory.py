"""The sampled states ``x_0 .. x_N`` of a rollout, keeping only those the update reads (docs/memory.md).

A method that knows its trained transitions before sampling (Flow-GRPO, Flow-GRPO-Fast, Flash-GRPO, JAGG) stores,
per sample, only the states ``x_i`` and ``x_{i+1}`` of its trained transitions ``i``; DanceGRPO draws them after
sampling and keeps every state. The states keep the dtype they were sampled in (fp32, float64 for the SOC toy:
log-probs are recomputed from them, so they are never rounded), on the device or, with
``method.trajectory_offload=true``, in pinned host memory, copied back per micro-batch.

With ``trajectory_offload`` the device-to-host copies are asynchronous (``non_blocking`` into pinned memory): each
sampling step's copy overlaps the next transformer call, and a CUDA event recorded after the copies is waited on
before the host reads the store. Writing the copy's result into the store at once (as this module first did) read the
pinned buffer before the copy had landed and stored garbage (issue 27); a blocking copy would be correct too, but
would make the host wait for each step's velocity before it could queue the next call, once per sampling step.

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


def copy_event(device: torch.device) -> torch.cuda.Event | None:
    """An event recorded on ``device``'s current stream after the copies queued so far: they have landed once it
    completes. None on the CPU, where a copy has landed when it returns."""
    if device.type != "cuda":
        return None
    event = torch.cuda.Event()
    event.record()
    return event


class Trajectory:
    """States of ``batch`` samples at ``num_states`` times, of which ``keep`` (B, num_states) bool are stored.

    The index tables live on the compute device, moved there once per rollout (one copy), so neither a write nor a
    read moves a host tensor per transformer call (docs/performance.md#one-host-sync-per-update)."""

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
        # per state i, the rows that keep it and their columns: host lists for the offloaded store's per-row copies,
        # device views of one table for the device store's writes and for reads
        self._rows: list[list[int]] = [[] for _ in range(num_states)]
        self._cols: list[list[int]] = [[] for _ in range(num_states)]
        slot = self.slot.tolist()  # host tables: these reads wait for nothing
        for i, row in keep.t().nonzero().tolist():
            self._rows[i].append(row)
            self._cols[i].append(slot[row][i])
        counts = [len(r) for r in self._rows]
        table = torch.cat(
            [
                self.slot.flatten(),
                torch.tensor([r for rows in self._rows for r in rows], dtype=torch.long),
                torch.tensor([c for cols in self._cols for c in cols], dtype=torch.long),
            ]
        ).to(self.device)  # the rollout's one host-to-device copy of its tables
        self._device_slot = table[: self.slot.numel()].view(self.slot.shape)
        rows_d, cols_d = table[self.slot.numel() :].view(2, sum(counts))
        self._writes = list(zip(rows_d.split(counts), cols_d.split(counts)))
        # offload: host memory (pinned on CUDA so the copies can be asynchronous); on the CPU the host is the device
        self.offloaded = bool(offload)
        store = torch.device("cpu") if self.offloaded else self.device
        width = int(keep.sum(1).max()) if batch else 0
        pin = self.offloaded and self.device.type == "cuda"
        self.states = torch.empty((batch, width, *state_shape), dtype=dtype, device=store, pin_memory=pin)
        self.shape = torch.Size((batch, num_states, *state_shape))
        self.dtype = dtype
        self._pending: torch.cuda.Event | None = None  # the last offloaded copies, until a read waits on them

    @property
    def nbytes(self) -> int:
        return self.states.numel() * self.states.element_size()

    def record(self, i: int, x: torch.Tensor) -> None:
        """Store state ``i`` of every sample that keeps it."""
        if not self._rows[i]:
            return
        if not self.offloaded:
            rows, cols = self._writes[i]
            self.states[rows, cols] = x[rows]
            return
        # straight into each sample's column of the pinned store (a view), queued behind the step that computed x;
        # the host does not wait here: reads wait on the event (module docstring)
        for row, col in zip(self._rows[i], self._cols[i]):
            self.states[row, col].copy_(x[row], non_blocking=True)
        self._pending = copy_event(x.device)

    def _landed(self) -> None:
        """Wait until every offloaded copy has landed in host memory (before the host reads the store)."""
        if self._pending is not None:
            self._pending.synchronize()
            self._pending = None

    def __getitem__(self, key) -> torch.Tensor:
        if not (isinstance(key, tuple) and len(key) == 2 and not any(isinstance(k, slice) for k in key)):
            return self.full()[key]  # plain tensor indexing when every state was kept
        table = self._device_slot
        samples, index = (torch.as_tensor(k, dtype=torch.long, device=table.device) for k in key)
        samples, index = torch.broadcast_tensors(samples, index)
        slots = table[samples, index]
        # checked on the device, not read back: no host sync in the update (docs/performance.md)
        torch._assert_async(
            (slots >= 0).all(),
            "a trained transition reads a state the rollout did not keep: the method's "
            "select_train_steps disagrees with the steps it announced before sampling",
        )
        if not self.offloaded:
            return self.states[samples, slots]
        # offload trades these syncs for memory: the host indexes the store, then copies the rows back
        self._landed()
        return self.states[samples.cpu(), slots.cpu()].to(self.device)

    def state(self, i: int, samples: torch.Tensor | None = None) -> torch.Tensor:
        """State ``i`` of ``samples`` (default: every sample)."""
        if samples is None:
            samples = torch.arange(self.shape[0], device=self._device_slot.device)
        samples = torch.as_tensor(samples, device=self._device_slot.device)
        return self[samples, torch.full_like(samples, int(i))]

    def full(self) -> torch.Tensor:
        """Every state as one (B, N + 1, *latent) tensor (only when all were kept; for tests and diagnostics)."""
        if not bool(self.keep.all()):
            raise ValueError("this trajectory kept only the states its trained transitions read")
        self._landed()
        return self.states.to(self.device)
