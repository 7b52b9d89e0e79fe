"""Asynchronous DCP checkpoints (``trainer.async_checkpoint=true``; docs/performance.md#asynchronous-checkpoints).

``torch.distributed.checkpoint.async_save`` first copies the state dict into fresh host memory (staging; this part
blocks, after it training may change the parameters and optimizer state in place), then writes the copy from a
background thread. Its collectives run on a process group of their own (gloo), so they never interleave with the
training's. Rank 0's future completes once DCP's coordinator has gathered every rank's write results and written
the metadata, i.e. once the checkpoint is whole on disk; the commit (``meta.json``, ``COMPLETE``, the rename, pruning:
:class:`launcher.checkpoint.manager.CheckpointManager`) then runs on rank 0 in that background thread, so a checkpoint
appears as soon as it can be resumed from. At most one save is in flight: the next save, a preemption hand-over and
the end of the run wait for it (:meth:`AsyncSaver.wait`).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

import torch.distributed as dist
import torch.distributed.checkpoint as dcp

log = logging.getLogger(__name__)


class _Pending:
    """One save in flight: its future, then the commit; :meth:`wait` re-raises what failed in the background."""

    def __init__(self, future, commit: Callable[[], None] | None, started: float):
        self.done = threading.Event()
        self.error: BaseException | None = None
        self._commit, self._started = commit, started
        future.add_done_callback(self._finish)

    def _finish(self, future) -> None:
        try:
            future.result()
            if self._commit is not None:
                self._commit()
            log.info(
                "asynchronous checkpoint written in %.2f s (in the background)", time.perf_counter() - self._started
            )
        except BaseException as e:  # noqa: BLE001 - handed to the training thread by wait()
            self.error = e
        finally:
            self.done.set()

    def wait(self) -> None:
        self.done.wait()
        if self.error is not None:
            raise RuntimeError(f"the asynchronous checkpoint failed: {self.error}") from self.error


class AsyncSaver:
    """Runs DCP saves in the background, one at a time. Build it on every rank (it creates a process group)."""

    def __init__(self):
        self._distributed = dist.is_available() and dist.is_initialized()
        self._group = dist.new_group(backend="gloo") if self._distributed else None
        self._pending: _Pending | None = None

    def start(self, state: dict[str, Any], checkpoint_id: str, commit: Callable[[], None] | None) -> None:
        """Stage ``state`` (blocking), then write it to ``checkpoint_id`` and run ``commit`` in the background."""
        self.wait()
        started = time.perf_counter()
        future = dcp.async_save(
            state, checkpoint_id=checkpoint_id, process_group=self._group, no_dist=not self._distributed
        )
        self._pending = _Pending(future, commit, started)

    def wait(self) -> bool:
        """Block until this rank's save in flight (if any) is written, and committed on rank 0; returns whether a
        save was in flight (the same on every rank)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.wait()
        return pending is not None
