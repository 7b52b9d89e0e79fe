"""The points of a ``cluster=local`` sweep for ``rewardflow-status``: from ``<sweep dir>/local_jobs.json``
(launcher/cluster/local_jobs.py) and each point's run dir (launcher/cluster/point_progress.py).

A point recorded as running whose process is gone was stopped from outside (the sweep's process killed, the
machine rebooted): it shows as ``stopped``, and the sweep's command resumes it from its last checkpoint.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from launcher.cluster import local_jobs as jobs
from launcher.cluster.point_progress import PointProgress, duration, mean_s_per_step, read_progress

STOPPED = "stopped"


def point_state(point: dict[str, Any], launcher_alive: bool) -> str:
    state = point.get("state", jobs.QUEUED)
    if state == jobs.RUNNING and not jobs.process_alive(point):
        return STOPPED
    if state == jobs.QUEUED and not launcher_alive:
        return STOPPED  # its launcher will never start it
    return state


def describe(point: dict[str, Any], state: str, p: PointProgress, fallback_s: float | None) -> str:
    reward = f", {p.reward_text()}" if p.reward_text() else ""
    if state == jobs.QUEUED:
        return "queued"
    if state == jobs.RUNNING:
        return f"running {p.steps_text()}{reward}, ETA {duration(p.remaining_s(fallback_s))}"
    if state == jobs.DONE:
        return f"done ({p.steps_text()}{reward})"
    if state == STOPPED:
        return f"stopped at {p.steps_text()}: its process is gone (the sweep's command resumes it)"
    reason = point.get("reason") or f"exit code {point.get('exit_code')}"
    return f"{state} at {p.steps_text()}: {reason}"


def status_lines(sweep_dir: Path) -> list[str]:
    record = jobs.read_jobs(sweep_dir)
    points = record["points"]
    progress = [read_progress(Path(pt["run_dir"]), pt.get("steps")) for pt in points]
    alive = jobs.process_alive(record.get("launcher", {}))
    states = [point_state(pt, alive) for pt in points]
    fallback = mean_s_per_step(progress)
    lines = [
        f"{pt['num']:>3}  {describe(pt, state, p, fallback)}  [{' '.join(pt['overrides']) or 'defaults'}]"
        for pt, state, p in zip(points, states, progress)
    ]
    return lines + [summary(states, progress, record, fallback)]


def summary(states: list[str], progress: list[PointProgress], record: dict[str, Any], fallback: float | None) -> str:
    from launcher.cluster.point_progress import sweep_remaining_s

    counts = ", ".join(f"{states.count(s)} {s}" for s in dict.fromkeys(states))
    active = [p for s, p in zip(states, progress) if s in (jobs.QUEUED, jobs.RUNNING)]
    launcher = record.get("launcher", {})
    parallel = int(launcher.get("parallel", 1))
    eta = duration(sweep_remaining_s(active, parallel)) if active else "0s"
    alive = jobs.process_alive(launcher)
    who = f"{parallel} at a time, pid {launcher.get('pid')}" if alive else "its process has ended"
    return f"sweep: {len(states)} points ({counts}) | {who} | ETA {eta}"


def ended(sweep_dir: Path) -> bool:
    record = jobs.read_jobs(sweep_dir)
    alive = jobs.process_alive(record.get("launcher", {}))
    return all(point_state(pt, alive) not in (jobs.QUEUED, jobs.RUNNING) for pt in record["points"])


def cancel(sweep_dir: Path, nums: list[int] | None) -> str:
    """Ask the sweep's launcher to cancel the points (None: all); when the launcher is gone, signal the points'
    processes directly (each checkpoints at the end of its step and stops: docs/resume.md#signals)."""
    import os
    import signal

    record = jobs.read_jobs(sweep_dir)
    known = {pt["num"] for pt in record["points"]}
    unknown = sorted(set(nums or []) - known)
    if unknown:
        raise ValueError(f"no point {', '.join(map(str, unknown))} in this sweep (its points: {sorted(known)})")
    jobs.request_cancel(sweep_dir, nums)
    if jobs.process_alive(record.get("launcher", {})):
        return "asked the sweep's launcher to cancel them"
    for pt in record["points"]:
        if (nums is None or pt["num"] in nums) and point_state(pt, False) == jobs.RUNNING:
            os.kill(int(pt["pid"]), signal.SIGTERM)
    return "the sweep's launcher has ended: sent SIGTERM to the running points"
