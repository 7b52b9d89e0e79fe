"""``rewardflow-status <sweep dir>``: the state of each point of a ``cluster=slurm`` sweep, from SLURM and the run dirs.

For each job recorded in ``<sweep dir>/slurm_jobs.json`` (launcher/cluster/slurm_jobs.py): queued (with SLURM's reason),
running step k of N (the run's ``metrics.jsonl`` and its ``trainer.steps``), done, or failed with the reason (the
job's ``rewardflow:`` message or the last line of its error log), and how many times SLURM requeued it (preemption,
time limit). Live jobs come from ``squeue``, finished ones from ``sacct`` (with ``--duplicates``, one row per attempt).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

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


def progress(run_dir: Path) -> tuple[int, int | None]:
    """(steps done, trainer.steps) of a run dir (0 and None before the run has written anything)."""
    done = 0
    metrics = run_dir / "metrics.jsonl"
    if metrics.exists():
        for line in metrics.read_text().splitlines():
            try:
                done = max(done, int(json.loads(line)["step"]) + 1)
            except (ValueError, KeyError, TypeError):
                continue
    total = None
    config = run_dir / ".hydra" / "config.yaml"
    if config.exists():
        from omegaconf import DictConfig, OmegaConf

        loaded = OmegaConf.load(config)
        if isinstance(loaded, DictConfig):  # a run's config is a mapping
            total = loaded.get("trainer", {}).get("steps")
    return done, total


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


def describe(job: dict, s: SlurmState) -> str:
    done, total = progress(Path(job["run_dir"]))
    of = f"step {done} of {total}" if total else "start-up"
    lines = log_lines(job["stderr"])
    # Hydra's task wrapper catches a run's exception, so its SLURM job still ends COMPLETED: the log tells
    task_failed = any(FAILURE_LINE.match(line) for line in lines)
    if s.state in QUEUED:
        text = f"queued ({s.reason})" if s.reason and s.reason != "None" else "queued"
    elif s.state in RUNNING:
        text = f"running {of}"
    elif s.state == "COMPLETED" and not task_failed:
        text = f"done ({of})"
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
    jobs = json.loads((sweep_dir / JOBS_FILE).read_text())
    states = slurm_states([j["job_id"] for j in jobs])
    return [
        f"{j['num']:>3}  {j['job_id']:<12} {describe(j, states.get(j['job_id'], SlurmState()))}  "
        f"[{' '.join(j['overrides']) or 'defaults'}]"
        for j in jobs
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="rewardflow-status", description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", type=Path, help="the sweep dir a `rewardflow cluster=slurm ...` command printed")
    args = parser.parse_args(argv)
    if not (args.sweep_dir / JOBS_FILE).exists():
        print(
            f"rewardflow-status: {args.sweep_dir} holds no {JOBS_FILE}: not the sweep dir of a cluster=slurm "
            f"sweep. Fix: pass the `sweep dir:` folder the submit command printed",
            file=sys.stderr,
        )
        sys.exit(2)
    print("\n".join(status_lines(args.sweep_dir)))


if __name__ == "__main__":
    main()
