"""One run per run dir: ``<run dir>/rewardflow.lock`` names the process that writes the folder.

Two runs started in one run dir would interleave their ``metrics.jsonl`` rows, checkpoints and W&B run. So rank 0
creates the lock file atomically (``O_CREAT | O_EXCL``, which also holds on NFS) before the run reads or writes
anything there, with its holder in JSON: host, pid (and the process's start time, so a reused pid is not mistaken
for the holder), the SLURM job and its requeue count. A daemon thread refreshes the file's modification time every
:data:`HEARTBEAT_S` seconds. A second start fails at once, naming the holder.

A lock is stale, and taken over with a warning, when its holder is gone:

- on this host: its process no longer exists (a crash, a kill, a node reboot);
- an earlier attempt of this same SLURM job (same job id, lower ``SLURM_RESTART_COUNT``): a requeued job only starts
  once its earlier attempt has ended, on whichever node it ran;
- on another host: no heartbeat for :data:`STALE_AFTER_S` seconds (a crashed node; the lock's pid cannot be
  checked from here).

Take-overs are serialised by a short-lived ``rewardflow.lock.takeover`` folder (``mkdir`` is atomic), inside which
the lock is re-read and replaced only if it still holds what was judged stale, so two starts that both find a stale
lock cannot both win.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from rewardflow.errors import ConfigError  # no torch here: the CLI takes the lock before the slow imports

log = logging.getLogger(__name__)

LOCK_NAME = "rewardflow.lock"
HEARTBEAT_S = 30.0
STALE_AFTER_S = 600.0  # 20 missed heartbeats: the holder on another host is gone
_UNREADABLE_GRACE_S = 10.0  # a lock file that is still being written reads as empty for a moment
_MUTEX_STALE_S = 60.0  # a take-over takes milliseconds; an older mutex folder was left by a crash


class RunDirBusy(ConfigError):
    """The run dir is locked by another live run."""


def _process_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux), to tell a reused pid from the holder."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # field 22; the command name before ")" may hold spaces


def _alive(pid: int, start: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        pass
    return start is None or _process_start(pid) in (None, start)


def _slurm_job() -> tuple[str | None, int]:
    """(job id, attempt): an array task is ``<array job>_<task>``; the attempt counts requeues."""
    env = os.environ
    job: str | None
    if env.get("SLURM_ARRAY_JOB_ID") and env.get("SLURM_ARRAY_TASK_ID"):
        job = f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
    else:
        job = env.get("SLURM_JOB_ID")
    return job, int(env.get("SLURM_RESTART_COUNT") or 0)


def _describe(holder: dict[str, Any], age_s: float) -> str:
    if not holder:
        return f"a run that is starting: its lock file is still empty, {age_s:.0f} s old"
    job = f", SLURM job {holder['job']} (attempt {holder['attempt']})" if holder.get("job") else ""
    return (
        f"host {holder.get('host')}, pid {holder.get('pid')}{job}, started {holder.get('started')}, "
        f"last heartbeat {age_s:.0f} s ago"
    )


class RunLock:
    """The lock of one run dir, held by this process once :meth:`acquire` returns."""

    def __init__(self, run_dir: str | Path):
        self.path = Path(run_dir).absolute() / LOCK_NAME
        self._mutex = self.path.with_name(LOCK_NAME + ".takeover")
        job, attempt = _slurm_job()
        self.me: dict[str, Any] = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "pid_start": _process_start(os.getpid()),
            "job": job,
            "attempt": attempt,
            "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            "token": uuid.uuid4().hex,
        }
        self.held = False
        self.awaiting_trainer = False  # taken by the CLI for the trainer it is about to build
        self.lost: str | None = None  # set when another process replaced this lock (see the heartbeat)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- acquiring ------------------------------------------------------------------------------------------------
    def acquire(self) -> RunLock:
        """Take the lock, taking over a stale one; raise :class:`RunDirBusy` naming a live holder."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(self.me)
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline:
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                seen, holder, age = self._read()
                if seen is None:
                    continue  # released meanwhile: try to create it again
                reason = self._stale_reason(holder, age)
                if reason is None:
                    raise RunDirBusy(self._busy_message(holder, age)) from None
                if self._take_over(seen, text):
                    log.warning(
                        "took over the stale lock of %s: %s (%s)", self.path.parent, reason, _describe(holder, age)
                    )
                    break
                time.sleep(0.05)
                continue
            with os.fdopen(fd, "w") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            break
        else:
            raise RunDirBusy(
                f"hydra.run.dir={self.path.parent}: could not take its lock {self.path} within 30 s "
                f"(other starts keep taking it over). Fix: start one run per run dir"
            )
        self.held = True
        _held_in_this_process[str(self.path)] = self
        atexit.register(self.release)
        self._thread = threading.Thread(target=self._heartbeat, name="rewardflow-run-lock", daemon=True)
        self._thread.start()
        return self

    def _busy_message(self, holder: dict[str, Any], age: float) -> str:
        here = holder.get("host") == self.me["host"]
        stop = f"stop it (kill {holder['pid']})" if here and "pid" in holder else "stop it"
        gone = (
            ""
            if here
            else f" If that process is gone (its node crashed), its lock is taken over once silent for "
            f"{STALE_AFTER_S / 60:.0f} min, or delete {self.path}."
        )
        return (
            f"hydra.run.dir={self.path.parent} is in use by another rewardflow run ({_describe(holder, age)}). Two "
            f"runs in one run dir would mix their metrics and checkpoints. Fix: wait for that run to end or "
            f"{stop}, or start this one in another run dir (drop hydra.run.dir for a new timestamped one).{gone}"
        )

    def _read(self) -> tuple[str | None, dict[str, Any], float]:
        """(raw text, holder, seconds since the last heartbeat); text None if the file vanished."""
        try:
            text = self.path.read_text()
            age = time.time() - self.path.stat().st_mtime
        except FileNotFoundError:
            return None, {}, 0.0
        try:
            holder = json.loads(text)
        except ValueError:
            holder = {}
        return text, holder if isinstance(holder, dict) else {}, age

    def _stale_reason(self, holder: dict[str, Any], age: float) -> str | None:
        """Why the holder is gone, or None if it may still be running."""
        if not holder.get("token"):
            return f"the lock file is unreadable and {age:.0f} s old" if age > _UNREADABLE_GRACE_S else None
        if holder.get("host") == self.me["host"]:
            if holder.get("pid") == self.me["pid"]:
                previous = _held_in_this_process.get(str(self.path))
                if previous is not None:
                    previous.held = False  # an earlier trainer of this process (tests, notebooks)
                    previous._stop.set()
                return "it was held by an earlier run in this same process"
            if not _alive(int(holder.get("pid", -1)), holder.get("pid_start")):
                return f"process {holder.get('pid')} no longer exists"
            return None
        if (
            holder.get("job")
            and holder.get("job") == self.me["job"]
            and int(holder.get("attempt", 0)) < self.me["attempt"]
        ):
            return f"it was held by attempt {holder.get('attempt')} of this requeued SLURM job"
        if age > STALE_AFTER_S:
            return f"no heartbeat for {age:.0f} s from host {holder.get('host')}"
        return None

    def _take_over(self, seen: str, text: str) -> bool:
        """Replace the lock if it still holds ``seen``; False if another process got there first."""
        if not self._enter_mutex():
            return False
        try:
            try:
                if self.path.read_text() != seen:
                    return False
            except FileNotFoundError:
                return False
            tmp = self.path.with_name(f".{LOCK_NAME}.{self.me['token']}")
            tmp.write_text(text)
            os.replace(tmp, self.path)
            return True
        finally:
            os.rmdir(self._mutex)

    def _enter_mutex(self) -> bool:
        try:
            os.mkdir(self._mutex)
            return True
        except FileExistsError:
            try:
                if time.time() - self._mutex.stat().st_mtime > _MUTEX_STALE_S:
                    os.rmdir(self._mutex)  # left by a process that died inside a take-over
            except OSError:
                pass
            return False

    # -- holding ----------------------------------------------------------------------------------------------------
    def _owned(self) -> bool:
        _, holder, _ = self._read()
        return holder.get("token") == self.me["token"]

    def _heartbeat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                if not self._owned():
                    _, holder, age = self._read()
                    self.lost = _describe(holder, age) if holder else "the lock file was removed"
                    log.error("the lock of run dir %s was taken by another process (%s)", self.path.parent, self.lost)
                    return
                os.utime(self.path)
            except OSError as e:  # a file-system hiccup: try again at the next beat
                log.warning("could not refresh the run-dir lock %s (%s)", self.path, e)

    def release(self) -> None:
        """Remove the lock if this process still holds it (idempotent)."""
        self._stop.set()
        if not self.held:
            return
        self.held = False
        _held_in_this_process.pop(str(self.path), None)
        if not self.path.parent.is_dir():  # the run dir itself is gone (a temporary one): nothing left to release
            return
        for _ in range(100):
            if self._enter_mutex():
                try:
                    if self._owned():
                        self.path.unlink()
                finally:
                    os.rmdir(self._mutex)
                return
            time.sleep(0.05)


_held_in_this_process: dict[str, RunLock] = {}


def lock_before_start(run_dir: str | Path) -> None:
    """The CLI of a single-process run takes the lock first thing, so that a second start fails within seconds
    rather than after the slow imports; the trainer then adopts it (:func:`lock_run_dir`)."""
    RunLock(run_dir).acquire().awaiting_trainer = True


def lock_run_dir(run_dir: str | Path, world) -> RunLock | None:
    """Rank 0 takes the run dir's lock, or adopts the one its CLI took; every rank raises the same
    :class:`RunDirBusy` if it cannot (collective)."""
    from rewardflow.distributed import broadcast_object

    lock, error = None, None
    early = _held_in_this_process.get(str(Path(run_dir).absolute() / LOCK_NAME))
    if world.is_main and early is not None and early.held and early.awaiting_trainer:
        early.awaiting_trainer = False
        lock = early
    elif world.is_main:
        try:
            lock = RunLock(run_dir).acquire()
        except RunDirBusy as e:
            error = str(e)
    error = broadcast_object(error)
    if error is not None:
        raise RunDirBusy(error)
    return lock
