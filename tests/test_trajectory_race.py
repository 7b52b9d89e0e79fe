"""``Trajectory.record`` with ``method.trajectory_offload``: the device-to-host copy is asynchronous on CUDA, so the
host must not read the store before the copy has landed (issue 27; methods/trajectory.py).

On the CPU nothing is asynchronous, so the test installs a stand-in device: every ``non_blocking=True`` copy
(``Tensor.to``, ``Tensor.copy_``) lands only when the copy event (``methods.trajectory.copy_event``) is waited on;
until then its destination holds NaN, as a pinned buffer holds whatever was there before. The first implementation
(the copy's result written into the store at once) stores NaN under it and fails. On a machine with CUDA the same
check runs for real, with the copies queued behind a long ``torch.cuda._sleep`` so they cannot have landed."""

from __future__ import annotations

import pytest
import torch

import methods.trajectory as trajectory
from methods.trajectory import Trajectory, transition_states


class DelayedCopies:
    """The stand-in device's copy engine: non-blocking copies queue, and land when an event is waited on."""

    def __init__(self):
        self.queued: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.to, self.copy_ = torch.Tensor.to, torch.Tensor.copy_

    def install(self, monkeypatch) -> None:
        engine = self

        def to(tensor, *args, **kwargs):
            if not kwargs.pop("non_blocking", False):
                return engine.to(tensor, *args, **kwargs)
            done = engine.to(tensor, *args, **kwargs).clone()
            staged = torch.full_like(done, float("nan"))  # the pinned buffer before the copy lands
            engine.queued.append((staged, done))
            return staged

        def copy_(dst, src, non_blocking=False):
            if not non_blocking:
                return engine.copy_(dst, src)
            engine.queued.append((dst, src.clone()))
            return dst.fill_(float("nan"))

        class Event:
            def synchronize(self) -> None:
                engine.land()

        monkeypatch.setattr(torch.Tensor, "to", to)
        monkeypatch.setattr(torch.Tensor, "copy_", copy_)
        monkeypatch.setattr(trajectory, "copy_event", lambda device: Event(), raising=False)

    def land(self) -> None:
        for dst, src in self.queued:
            self.copy_(dst, src)
        self.queued.clear()


def record_and_read(device: torch.device, before_record=lambda: None) -> tuple[torch.Tensor, torch.Tensor]:
    """Record 3 samples x 5 states (each sample keeps the states of its trained transitions) with offload, and read
    every kept state back: ``(read, expected)``."""
    steps = torch.tensor([[0, 2], [1, 3], [2, 3]])
    keep = transition_states(steps, 5)
    traj = Trajectory(3, 5, (4, 8), torch.float32, device, keep, offload=True)
    states = [torch.randn(3, 4, 8, generator=torch.Generator().manual_seed(i)).to(device) for i in range(5)]
    for i, x in enumerate(states):
        before_record()
        traj.record(i, x)
    samples, index = keep.nonzero(as_tuple=True)
    read = traj[samples.to(device), index.to(device)]
    expected = torch.stack([states[i][s] for s, i in zip(samples.tolist(), index.tolist())])
    return read.cpu(), expected.cpu()


def test_offloaded_states_are_read_after_their_copy_landed(monkeypatch):
    engine = DelayedCopies()
    engine.install(monkeypatch)
    read, expected = record_and_read(torch.device("cpu"))
    assert torch.equal(read, expected)  # the first implementation: NaN, stored before its copy landed
    assert not engine.queued  # the read waited on the copies


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: the asynchronous copy itself")
def test_offloaded_states_are_exact_on_cuda():
    # each record is queued behind ~50 ms of device sleep: a host write of the copy's result at once reads the pinned
    # buffer long before the copy lands
    read, expected = record_and_read(torch.device("cuda"), lambda: torch.cuda._sleep(50_000_000))
    assert torch.equal(read, expected)
