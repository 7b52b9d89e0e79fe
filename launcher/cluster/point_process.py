"""A sweep point's own process, started from a fork server that imported torch, diffusers and the trainer once.

Each point of a ``cluster=local`` sweep runs in its own process (launcher/cluster/local_sweep.py). Started as
``python -m launcher.cluster.local_point``, every point paid Python's start and the imports of torch, diffusers,
transformers and the trainer again: about 7 s on 2 cores, which made a 2x2 sweep of the demo run side by side no
faster than Hydra's basic launcher running the points one after the other in one process (issue 29: 43.6 s against
41.9 s). Here the points are forked from multiprocessing's fork server, which imports those modules once
(:data:`PRELOAD`) before any of them has started a thread or touched a device; each point is still a process of its
own (its own session, signal handlers, torch threads, exit code and pid for ``rewardflow-status --cancel``).

:class:`PointProcess` offers the part of ``subprocess.Popen`` the launcher uses (``pid``, ``poll``, ``returncode``,
``send_signal``). With points side by side, a point's stdout and stderr go to two FIFOs that the launcher reads and
prefixes with the point's number.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import signal
import sys
from pathlib import Path
from typing import Any

#: imported once by the fork server, so that a point starts in a fraction of a second: the libraries and the modules
#: every point's training imports (named, not imported here: this room uses none of them; importing starts no
#: thread and touches no device)
PRELOAD = [
    "torch",
    "transformers",
    "diffusers",
    "launcher.cli",
    "launcher.train.trainer",
    "launcher.cluster.point_preload",
]
_context: Any = None
_family_modules: list[str] = []


def preload_families(modules: list[str]) -> None:
    """Have the fork server also import ``modules`` (the sweep's model families' ``preload_modules``): called by the
    launcher before its first point starts the server."""
    _family_modules[:] = [m for m in dict.fromkeys(modules) if m not in PRELOAD]


def start_early(modules: list[str]) -> None:
    """Start the fork server now, importing :data:`PRELOAD` and ``modules`` in its own process while the launcher
    still composes and checks the sweep's points (launcher/cluster/sweep_check.py calls this first): those checks
    and the server's imports were the serial start of every local sweep, one after the other (issue 29: 9.3 s before
    the first point's first line, 6.5 s of it the server's imports). Starting does not wait for the imports: the first
    point's ``start`` does."""
    from multiprocessing import forkserver

    preload_families(modules)
    _fork_server()
    forkserver.ensure_running()


def stop_server() -> None:
    """End the fork server: once a sweep's points have all ended, or when :func:`start_early` started it for a sweep
    that will not run (a point failed its check). Left alone, it ends when the launcher has exited, but only after
    its imports and then its own interpreter teardown (1-2 s with torch and diffusers loaded), holding the launcher's
    stdout meanwhile."""
    from multiprocessing import forkserver

    pid = getattr(forkserver._forkserver, "_forkserver_pid", None)  # the stdlib keeps no public handle on it
    if pid:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


def _fork_server() -> Any:
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(PRELOAD + _family_modules + ["launcher.cluster.point_freeze"])
    return _context


def _run(payload: str, env: dict[str, str], outputs: tuple[str, str] | None) -> None:
    """The point's process: a session of its own (a terminal's Ctrl-C reaches the launcher only, which passes on one
    SIGTERM), the launcher's environment for it, its output to the FIFOs, then Hydra's ``run_job`` on the payload."""
    os.setsid()
    signal.signal(signal.SIGINT, signal.default_int_handler)  # the fork server ignores it; a point handles it itself
    os.environ.update(env)
    if outputs is not None:
        for fd, path in zip((1, 2), outputs):
            w = os.open(path, os.O_WRONLY)
            os.dup2(w, fd)
            os.close(w)
    from launcher.cluster.local_point import main

    try:
        main(payload)
    finally:  # the fork server's children end with os._exit, which skips the interpreter's exit: run it here, so
        # what the run registered there (W&B's teardown that flushes an offline run, logging's shutdown) still runs
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()


class PointProcess:
    """A point's process (see the module docstring)."""

    def __init__(self, payload: Path, env: dict[str, str], outputs: tuple[Path, Path] | None = None):
        args = (str(payload), env, None if outputs is None else (str(outputs[0]), str(outputs[1])))
        self._process = _fork_server().Process(target=_run, args=args, name=f"rewardflow-point-{payload.stem}")
        self._process.start()
        self.pid: int = int(self._process.pid or 0)

    def poll(self) -> int | None:
        """The exit code once the process has ended (minus the signal's number if a signal ended it), else None."""
        return self._process.exitcode

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def send_signal(self, sig: int) -> None:
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            pass  # it has just ended
