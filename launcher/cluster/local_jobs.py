"""``<sweep dir>/local_jobs.json``: the points of a ``cluster=local`` sweep, for ``rewardflow-status``.

The local sweep launcher (launcher/cluster/local_sweep.py) is the only writer: it lists every point as queued when
the batch starts, then records each point's process id when it starts and its end (done, failed with the reason,
or cancelled). Each write replaces the file atomically (a reader never sees half a file). ``rewardflow-status``
(launcher/cluster/sweep_status.py) reads it, checks that the recorded processes still exist (a process id with its
start time, as the run dir's lock does: launcher/checkpoint/run_lock.py), and asks for cancellations through
``<sweep dir>/local_cancel`` (one point number or ``all`` a line), which the launcher polls: one writer per file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from launcher.checkpoint.run_lock import _alive, _process_start

JOBS_FILE = "local_jobs.json"
CANCEL_FILE = "local_cancel"

QUEUED, RUNNING, DONE, FAILED, CANCELLED = "queued", "running", "done", "failed", "cancelled"
ENDED = {DONE, FAILED, CANCELLED}


def process_record(pid: int) -> dict[str, Any]:
    """A process id and its start time (tells a reused id from the recorded process)."""
    return {"pid": pid, "pid_start": _process_start(pid)}


def process_alive(record: dict[str, Any]) -> bool:
    pid = record.get("pid")
    return pid is not None and int(pid) > 0 and _alive(int(pid), record.get("pid_start"))


def read_jobs(sweep_dir: Path) -> dict[str, Any]:
    """``{"launcher": {pid, pid_start, parallel}, "points": [{num, overrides, run_dir, state, ...}]}``."""
    return json.loads((Path(sweep_dir) / JOBS_FILE).read_text())


def write_jobs(sweep_dir: Path, record: dict[str, Any]) -> None:
    path = Path(sweep_dir) / JOBS_FILE
    tmp = path.with_name(f".{JOBS_FILE}.{os.getpid()}")
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    os.replace(tmp, path)


def request_cancel(sweep_dir: Path, nums: list[int] | None) -> None:
    """Ask the sweep's launcher to cancel these points (None: every point)."""
    with open(Path(sweep_dir) / CANCEL_FILE, "a") as fh:
        fh.write("".join(f"{n}\n" for n in nums) if nums is not None else "all\n")


def cancel_requests(sweep_dir: Path) -> tuple[bool, set[int]]:
    """(every point, the point numbers) asked to be cancelled so far."""
    path = Path(sweep_dir) / CANCEL_FILE
    if not path.exists():
        return False, set()
    words = path.read_text().split()
    return "all" in words, {int(w) for w in words if w.isdigit()}
