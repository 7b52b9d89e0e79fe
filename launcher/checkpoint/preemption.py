"""Turn SLURM's preemption / time-limit signal into a checkpoint at a step boundary.

submitit installs a handler for its signal (USR2 by default, ``SUBMITIT_PREEMPT_SIGNAL``) in every task, but only
global rank 0 acts on it: it pickles the job and requeues it at once. A sharded DCP checkpoint needs *every* rank, at
a point where no collective is in flight. So :func:`install` (called first thing in the task, before the slow imports
and model loading, so an early signal is not lost) replaces that handler by one that only records the time; the
trainer then asks :meth:`PreemptionGuard.should_stop` after each step, the ranks agree, write a checkpoint together,
and rank 0 calls submitit's original handler, which requeues the job (or ends it after ``max_num_timeout``
time-outs). The other ranks wait to be stopped by the requeue, as submitit expects of them.

When to stop: on preemption (SIGTERM with the signal, or submitit judging the job not timed out) at the next step
boundary. On a time-limit signal the job still has ``signal_delay_s`` seconds, so training goes on until half of
them are spent, keeping the other half for the checkpoint and the requeue (SLURM may send the signal earlier than
``signal_delay_s`` before the limit, never later).

A local run (``cluster=local``, one process, no submitit) gets the same behaviour for the signals a user or a job
manager sends it: SIGTERM, SIGUSR1, SIGUSR2 and SIGINT (Ctrl-C) are recorded, the step in progress ends, a checkpoint
of it is written, the W&B run is finished and the run dir's lock released, and the process exits with 128 + the
signal's number and a one-line message instead of a traceback; a second signal stops at once (docs/resume.md#signals).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

log = logging.getLogger(__name__)

_GUARD: PreemptionGuard | None = None


#: what a local run checkpoints on (a submitit task: submitit's own signal only)
LOCAL_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2, signal.SIGINT)


class StoppedBySignal(Exception):
    """A local run stopped at a step boundary after a signal, its checkpoint written."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(
            f"stopped by {signal.Signals(signum).name} at the end of a step; its checkpoint is written. "
            f"Run the same command in the same run dir (hydra.run.dir) to continue"
        )


def install(signal_delay_s: float = 0.0, local: bool = False) -> PreemptionGuard:
    """Install (once per process) the recording handler in place of submitit's, if this is a submitit task, or
    (``local``: a single-process ``cluster=local`` run) for :data:`LOCAL_SIGNALS`."""
    global _GUARD
    if _GUARD is None:
        _GUARD = PreemptionGuard(signal_delay_s, local)
    return _GUARD


class PreemptionGuard:
    def __init__(self, signal_delay_s: float = 0.0, local: bool = False):
        self.signal_delay_s = float(signal_delay_s)
        self.signaled_at: float | None = None
        self.timed_out = False
        self.signum: int | None = None
        self._original: Callable[[int, FrameType | None], Any] | None = None
        self.local = False
        if not (os.environ.get("SUBMITIT_EXECUTOR") or os.environ.get("SUBMITIT_LOCAL_JOB_ID")):
            # not a submitit task (checked without importing torch)
            if local and threading.current_thread() is threading.main_thread():
                self.local = True
                for signum in LOCAL_SIGNALS:
                    signal.signal(signum, self._on_local_signal)
            return
        from submitit.core.job_environment import JobEnvironment

        self.signum = JobEnvironment._usr_sig()
        original = signal.getsignal(self.signum)
        if callable(original):
            self._original = original
            signal.signal(self.signum, self._on_signal)

    @property
    def active(self) -> bool:
        return self._original is not None or self.local

    def _on_local_signal(self, signum, frame) -> None:
        if self.signaled_at is not None:  # a second signal: stop now, as without this handler
            for s in LOCAL_SIGNALS:
                signal.signal(s, signal.SIG_DFL if s != signal.SIGINT else signal.default_int_handler)
            signal.raise_signal(signum)
            return
        self.signaled_at, self.signum = time.monotonic(), signum
        log.warning(
            "received %s: will checkpoint at the end of this step and stop (send it again to stop at once, "
            "losing the step)",
            signal.Signals(signum).name,
        )

    @property
    def requested(self) -> bool:
        return self.signaled_at is not None

    def _on_signal(self, signum, frame) -> None:
        if self.signaled_at is not None:
            return
        self.signaled_at = time.monotonic()
        handler: Any = getattr(self._original, "__self__", None)  # submitit's SignalHandler decides which case
        self.timed_out = bool(handler.has_timed_out()) if hasattr(handler, "has_timed_out") else False
        log.warning(
            "received %s (%s): will checkpoint %s",
            signal.Signals(signum).name,
            "time limit" if self.timed_out else "preemption",
            f"within {self.signal_delay_s / 2:.0f} s" if self.timed_out else "at the end of this step",
        )

    def _due(self) -> bool:
        if self.signaled_at is None:
            return False
        if not self.timed_out:
            return True
        return time.monotonic() - self.signaled_at >= self.signal_delay_s / 2

    def should_stop(self) -> bool:
        """Collective: True on every rank as soon as one rank is due to stop."""
        if not self.active:
            return False
        from rewardflow.distributed import any_rank

        return any_rank(self._due())

    def hand_over(self, is_main: bool) -> None:
        """After the checkpoint: rank 0 lets submitit requeue the job (this exits); others wait to be stopped."""
        if self.local:
            assert self.signum is not None
            raise StoppedBySignal(self.signum)
        if is_main:
            assert self._original is not None and self.signum is not None  # hand_over follows should_stop: active
            self._original(self.signum, None)
            return
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            time.sleep(1.0)
