"""Turn SLURM's preemption / time-limit signal into a checkpoint at the next step boundary.

submitit installs a handler for its signal (USR2 by default, ``SUBMITIT_PREEMPT_SIGNAL``) in every task, but only
global rank 0 acts on it: it pickles the job and requeues it. A sharded DCP checkpoint needs *every* rank, at a
point where no collective is in flight. So the trainer replaces the handler by one that only raises a flag; at
the end of each step the ranks agree on the flag (``any_rank``), write a checkpoint together, and then rank 0 calls
submitit's original handler, which requeues the job (or ends it after ``max_num_timeout`` time-outs). The other
ranks wait to be stopped by the requeue, as submitit expects of them.
"""
from __future__ import annotations

import logging
import signal
import time

from launcher.distributed import World, any_rank, submitit_job_env

log = logging.getLogger(__name__)


class PreemptionGuard:
    def __init__(self, world: World):
        self.world = world
        self.requested = False
        self.signum = None
        self._original = None
        if submitit_job_env() is None:
            return
        from submitit.core.job_environment import JobEnvironment

        self.signum = JobEnvironment._usr_sig()
        self._original = signal.getsignal(self.signum)
        if callable(self._original):
            signal.signal(self.signum, self._on_signal)
        else:
            self._original = None

    @property
    def active(self) -> bool:
        return self._original is not None

    def _on_signal(self, signum, frame) -> None:
        log.warning("received %s: will checkpoint at the end of this step", signal.Signals(signum).name)
        self.requested = True

    def should_stop(self) -> bool:
        """Collective: True on every rank if any rank received the signal."""
        return self.active and any_rank(self.requested)

    def hand_over(self) -> None:
        """After the checkpoint: rank 0 lets submitit requeue the job (this exits); others wait to be stopped."""
        if self.world.is_main:
            self._original(self.signum, None)
            return
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            time.sleep(1.0)
