"""``rewardflow-status <sweep dir> [--watch] [--cancel [N ...]]``: the state of each point of a sweep, and its ETA.

A ``cluster=local`` sweep (``<sweep dir>/local_jobs.json``): launcher/cluster/local_status.py. A ``cluster=slurm``
sweep: for each job recorded in ``<sweep dir>/slurm_jobs.json`` (launcher/cluster/slurm_jobs.py): queued (with SLURM's reason),
running with k/N steps done (the run's ``metrics.jsonl`` and its ``trainer.steps``), done, or failed with the reason (the
job's ``rewardflow:`` message or the last line of its error log), and how many times SLURM requeued it (preemption,
time limit). Live jobs come from ``squeue``, finished ones from ``sacct`` (with ``--duplicates``, one row per attempt).
A running point also shows its last reward and its time left, and a last line the sweep's
(launcher/cluster/point_progress.py). ``--watch`` prints the table again every ``--interval`` seconds until every
point has ended; ``--cancel`` stops the sweep's points (all, or the numbers given): ``scancel`` for SLURM jobs, a
request to the local launcher (or SIGTERM to the points when it is gone) for a local sweep, then waits for them to
end (docs/clusters.md#following-a-sweep).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from launcher.cluster import local_jobs, local_status
from launcher.cluster.point_progress import PointProgress, duration, mean_s_per_step, read_progress, sweep_remaining_s
from launcher.cluster.slurm_jobs import JOBS_FILE

QUEUED = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING", "RESV_DEL_HOLD", "SUSPENDED"}
RUNNING = {"RUNNING", "COMPLETING", "STAGE_OUT", "SIGNALING", "RESIZING"}


@dataclass
class SlurmState:
    state: str = "UNKNOWN"
    reason: str = ""
    exit_code: str = ""
    attempts: int = 0  # rows of this job in sacct --duplicates: 1 + requeues


def _run(args: list[str]) -> str:
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def slurm_states(job_ids: list[str]) -> dict[str, SlurmState]:
    """SLURM's view of each job: squeue for live jobs (no accounting lag), sacct for finished ones and attempts."""
    states: dict[str, SlurmState] = {}
    ids = ",".join(job_ids)
    for line in _run(
        [
            "sacct",
            "--noheader",
            "--parsable2",
            "--allocations",
            "--duplicates",
            f"--jobs={ids}",
            "--format=JobID,State,ExitCode,Reason",
        ]
    ).splitlines():
        job, state, exit_code, reason = (line.split("|") + ["", "", "", ""])[:4]
        s = states.setdefault(job, SlurmState())
        s.attempts += 1
        s.state, s.exit_code, s.reason = state.split()[0] if state else "UNKNOWN", exit_code, reason
    for line in _run(["squeue", "--noheader", f"--jobs={ids}", "--format=%i|%T|%r"]).splitlines():
        job, state, reason = (line.split("|") + ["", "", ""])[:3]
        s = states.setdefault(job, SlurmState(attempts=1))
        s.state, s.reason = state, reason
    return states


#: the last line of a Python traceback: ``RuntimeError: ...``, ``torch.OutOfMemoryError: ...``
EXCEPTION_LINE = re.compile(r"^[\w.]*(Error|Exception|Interrupt|Exit)\b.*?: ")
#: what a failing task writes to its error log: the CLI's one-paragraph report, or launcher/cli.py's traceback header
FAILURE_LINE = re.compile(r"^(rewardflow: |rank \d+ failed:)")


def log_lines(stderr_file: str) -> list[str]:
    path = Path(stderr_file)
    if not path.exists():
        return []
    return [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]


def failure_reason(lines: list[str]) -> str:
    """The task's own explanation of a failure in its error log (empty when it reports none): its last
    ``rewardflow:`` message, else the last exception line (the traceback's cause)."""
    ours = [line for line in lines if line.startswith("rewardflow:")]
    exceptions = [line for line in lines if EXCEPTION_LINE.match(line)]
    return (ours or exceptions or [""])[-1][:300]


def describe(job: dict, s: SlurmState, p: PointProgress | None = None, fallback_s: float | None = None) -> str:
    p = p if p is not None else read_progress(Path(job["run_dir"]))
    of = p.steps_text()
    lines = log_lines(job["stderr"])
    # Hydra's task wrapper catches a run's exception, so its SLURM job still ends COMPLETED: the log tells
    task_failed = any(FAILURE_LINE.match(line) for line in lines)
    if s.state in QUEUED:
        text = f"queued ({s.reason})" if s.reason and s.reason != "None" else "queued"
    elif s.state in RUNNING:
        reward = f", {p.reward_text()}" if p.reward_text() else ""
        text = f"running {of}{reward}, ETA {duration(p.remaining_s(fallback_s))}"
    elif s.state == "COMPLETED" and not task_failed:
        text = f"done ({of})"
    elif s.state.startswith("CANCELLED"):  # scancel (rewardflow-status --cancel), or the site's
        text = f"cancelled at {of}"
    elif s.state == "UNKNOWN":
        text = f"unknown to SLURM ({of} in the run dir)"
    else:
        reason = failure_reason(lines) or s.reason or (lines[-1][:300] if lines else "")
        how = (
            "the run raised; SLURM: COMPLETED"
            if s.state == "COMPLETED"
            else f"SLURM: {s.state}, exit code {s.exit_code or '?'}"
        )
        text = f"failed ({how}) at {of}: {reason}"
    requeues = max(0, s.attempts - 1)
    return text + (f", requeued {requeues} time{'s' if requeues > 1 else ''}" if requeues else "")


def status_lines(sweep_dir: Path) -> list[str]:
    if (sweep_dir / local_jobs.JOBS_FILE).exists():
        return local_status.status_lines(sweep_dir)
    jobs = json.loads((sweep_dir / JOBS_FILE).read_text())
    states = slurm_states([j["job_id"] for j in jobs])
    progress = [read_progress(Path(j["run_dir"])) for j in jobs]
    fallback = mean_s_per_step(progress)
    slurm = [states.get(j["job_id"], SlurmState()) for j in jobs]
    lines = [
        f"{j['num']:>3}  {j['job_id']:<12} {describe(j, s, p, fallback)}  [{' '.join(j['overrides']) or 'defaults'}]"
        for j, s, p in zip(jobs, slurm, progress)
    ]
    active = [p for s, p in zip(slurm, progress) if s.state in QUEUED | RUNNING]
    kinds = ["queued" if s.state in QUEUED else "running" if s.state in RUNNING else "ended" for s in slurm]
    counts = ", ".join(f"{kinds.count(k)} {k}" for k in dict.fromkeys(kinds))
    eta = duration(sweep_remaining_s(active, None)) if active else "0s"
    return lines + [f"sweep: {len(jobs)} SLURM jobs ({counts}) | ETA {eta}"]


def slurm_ended(sweep_dir: Path) -> bool:
    jobs = json.loads((sweep_dir / JOBS_FILE).read_text())
    states = slurm_states([j["job_id"] for j in jobs])
    return all(states.get(j["job_id"], SlurmState()).state not in QUEUED | RUNNING for j in jobs)


def slurm_cancel(sweep_dir: Path, nums: list[int] | None) -> str:
    jobs = json.loads((sweep_dir / JOBS_FILE).read_text())
    known = {int(j["num"]) for j in jobs}
    unknown = sorted(set(nums or []) - known)
    if unknown:
        raise ValueError(f"no point {', '.join(map(str, unknown))} in this sweep (its points: {sorted(known)})")
    ids = [j["job_id"] for j in jobs if nums is None or int(j["num"]) in nums]
    proc = subprocess.run(["scancel", *ids], capture_output=True, text=True, timeout=60)
    if proc.returncode:
        raise ValueError(f"scancel {' '.join(ids)} failed: {proc.stderr.strip() or proc.returncode}")
    return f"scancel {' '.join(ids)}"


def ended(sweep_dir: Path) -> bool:
    if (sweep_dir / local_jobs.JOBS_FILE).exists():
        return local_status.ended(sweep_dir)
    return slurm_ended(sweep_dir)


def _fail(message: str) -> None:
    print(f"rewardflow-status: {message}", file=sys.stderr)
    sys.exit(2)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="rewardflow-status", description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", type=Path, help="the sweep dir a `rewardflow -m ...` command printed")
    parser.add_argument("--watch", action="store_true", help="print the table again until every point has ended")
    parser.add_argument("--interval", type=float, default=10.0, help="seconds between --watch tables (default 10)")
    parser.add_argument(
        "--cancel",
        type=int,
        nargs="*",
        metavar="N",
        help="cancel these points (their numbers), or the whole sweep when none is given; waits until they end",
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="--cancel: seconds to wait (default 300)")
    args = parser.parse_args(argv)
    local = (args.sweep_dir / local_jobs.JOBS_FILE).exists()
    if not local and not (args.sweep_dir / JOBS_FILE).exists():
        _fail(
            f"{args.sweep_dir} holds neither {local_jobs.JOBS_FILE} (a cluster=local sweep) nor {JOBS_FILE} "
            f"(cluster=slurm): not a sweep dir, or a sweep that has not launched a point yet. Fix: pass the "
            f"`sweep dir:` folder the sweep command printed"
        )
    if args.interval <= 0:
        _fail(f"--interval must be > 0 seconds (got {args.interval})")
    if args.cancel is not None:
        nums = args.cancel or None
        try:
            how = local_status.cancel(args.sweep_dir, nums) if local else slurm_cancel(args.sweep_dir, nums)
        except ValueError as e:
            _fail(f"--cancel: {e}")
        print(f"cancelling {'the whole sweep' if nums is None else 'point(s) ' + ', '.join(map(str, nums))}: {how}")
        deadline = time.monotonic() + args.timeout
        while not _cancelled(args.sweep_dir, nums, local) and time.monotonic() < deadline:
            time.sleep(1.0)
    while True:
        print("\n".join(status_lines(args.sweep_dir)), flush=True)
        if not args.watch or ended(args.sweep_dir):
            return
        time.sleep(args.interval)
        print(f"-- {time.strftime('%H:%M:%S')}")


def _cancelled(sweep_dir: Path, nums: list[int] | None, local: bool) -> bool:
    """Whether every point asked for has ended."""
    if local:
        record = local_jobs.read_jobs(sweep_dir)
        alive = local_jobs.process_alive(record.get("launcher", {}))
        return all(
            local_status.point_state(pt, alive) not in (local_jobs.QUEUED, local_jobs.RUNNING)
            for pt in record["points"]
            if nums is None or pt["num"] in nums
        )
    jobs = [j for j in json.loads((sweep_dir / JOBS_FILE).read_text()) if nums is None or int(j["num"]) in nums]
    states = slurm_states([j["job_id"] for j in jobs])
    return all(states.get(j["job_id"], SlurmState()).state not in QUEUED | RUNNING for j in jobs)


if __name__ == "__main__":
    main()
