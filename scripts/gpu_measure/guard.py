"""Time guard of the GPU check: a deadline that stops a block of Python (``Deadline``), a call recorded as ok / error /
timeout (``run_guarded``), and the budget shared among the sections in order (``SectionRunner``).

A section whose share is below its minimum is skipped (saying so); one that overruns its share is stopped by the
alarm and marked ``timeout``. Time a section does not use goes to the ones after it. The alarm (SIGALRM, main thread)
lands between Python bytecodes: a single CUDA call that hangs is not interrupted, which is why the device command
also runs under the device tool's own time limit and every figure is written the moment it is measured.
"""

from __future__ import annotations

import signal
import time
import traceback
from typing import Callable

MARGIN_S = 3.0  # kept back from the budget for the summary


class Overrun(BaseException):
    """Raised by the alarm of an expired :class:`Deadline`. A BaseException, so that library code catching
    ``Exception`` cannot swallow it."""

    def __init__(self, deadline: Deadline):
        super().__init__(f"deadline of {deadline.seconds:.0f} s passed")
        self.deadline = deadline


class Deadline:
    """``with Deadline(s) as d: ...`` stops the block after ``s`` seconds (SIGALRM, main thread); ``d.expired`` then
    says so. Deadlines nest: the alarm is set for the earliest, and an inner block stopped by an outer deadline
    passes the stop on to it. The outermost one puts back the SIGALRM handler and timer it found (e.g.
    pytest-timeout's), counting down the time spent."""

    _stack: list[Deadline] = []
    _saved: tuple = ()  # (handler, seconds left on the timer, interval, when saved)

    def __init__(self, seconds: float):
        self.seconds = max(0.0, float(seconds))
        self.expiry = 0.0
        self.expired = False
        self.closing = False

    def __enter__(self) -> Deadline:
        self.expiry = time.monotonic() + self.seconds
        if not Deadline._stack:
            left, interval = signal.getitimer(signal.ITIMER_REAL)
            Deadline._saved = (signal.getsignal(signal.SIGALRM), left, interval, time.monotonic())
            signal.signal(signal.SIGALRM, Deadline._on_alarm)
        Deadline._stack.append(self)
        Deadline._arm()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        self.closing = True  # an alarm from now on no longer stops this block
        Deadline._stack.remove(self)
        Deadline._arm()
        if not Deadline._stack:
            handler, left, interval, since = Deadline._saved
            signal.signal(signal.SIGALRM, handler)
            if left > 0:
                signal.setitimer(signal.ITIMER_REAL, max(left - (time.monotonic() - since), 1e-3), interval)
        if exc_type is Overrun and exc.deadline is self:
            self.expired = True
            return True
        return False

    @staticmethod
    def _arm() -> None:
        if Deadline._stack:
            left = min(d.expiry for d in Deadline._stack) - time.monotonic()
            signal.setitimer(signal.ITIMER_REAL, max(left, 1e-3))
        else:
            signal.setitimer(signal.ITIMER_REAL, 0)

    @staticmethod
    def _on_alarm(signum, frame) -> None:
        now = time.monotonic()
        due = [d for d in Deadline._stack if d.expiry <= now + 1e-3 and not d.closing]
        if not due:  # woke early: wait for the earliest again
            Deadline._arm()
            return
        raise Overrun(due[0])  # the outermost expired block: everything inside it unwinds


def run_guarded(res: dict, seconds: float, fn: Callable[[], None]) -> None:
    """``fn()`` within ``seconds``, recorded in ``res``: an exception becomes status ``error`` (with the traceback's
    tail), an overrun ``timeout``; otherwise ``ok`` unless ``fn`` set a status itself; ``seconds`` is the time taken."""
    t0 = time.monotonic()
    d = Deadline(seconds)
    try:
        with d:
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - a failing part is reported, the next ones still run
                res.update(
                    status="error", error=f"{type(e).__name__}: {e}"[:2000], traceback=traceback.format_exc()[-3000:]
                )
    except Overrun as e:  # the alarm landed in the instant the block was closing
        if e.deadline is not d:
            raise
        d.expired = True
    if d.expired:
        res.update(status="timeout", reason=f"stopped at its {seconds:.0f} s share")
    res.setdefault("status", "ok")
    res["seconds"] = round(time.monotonic() - t0, 2)


class SectionRunner:
    """Runs the sections in order, each within its share of what is left of the budget: the time left times its
    planned weight over the weights of the sections still to run."""

    def __init__(
        self, budget_s: float, order: list[str], weights: dict[str, float], minimum: dict[str, float], start: float
    ):
        self.budget_s, self.order, self.weights, self.minimum, self.start = budget_s, order, weights, minimum, start

    def left(self) -> float:
        return self.budget_s - MARGIN_S - (time.monotonic() - self.start)

    def share(self, name: str) -> float:
        rest = self.order[self.order.index(name) :]
        return max(0.0, self.left()) * self.weights[name] / sum(self.weights[s] for s in rest)

    def run(self, name: str, fn: Callable[[float], None]) -> dict:
        """``fn(share)`` guarded; returns the section's status record (``status``, ``seconds``, ``allowance_s``)."""
        share = self.share(name)
        res: dict = {"allowance_s": round(share, 1)}
        if share < self.minimum[name]:
            res.update(
                status="skipped",
                seconds=0.0,
                reason=f"{max(0.0, self.left()):.0f} s of the {self.budget_s:.0f} s budget left: its share "
                f"{share:.0f} s < the {self.minimum[name]:.0f} s it needs",
            )
            return res
        cpu0 = time.process_time()
        run_guarded(res, share, lambda: fn(share))
        res["cpu_s"] = round(time.process_time() - cpu0, 2)  # this process's CPU time (not the benches')
        return res
