"""How ``rewardflow-status`` words each state of a sweep point from SLURM's state and the run dir (the end-to-end
follow of real jobs is tests/test_slurm_fire_and_forget.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.cluster.sweep_status import SlurmState, describe, main


@pytest.fixture
def job(tmp_path):
    run_dir = tmp_path / "0"
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra" / "config.yaml").write_text("trainer:\n  steps: 150\n")
    (run_dir / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "reward/mean": 0.5, "time/step_s": 2.0}) + "\n" for s in range(37))
    )
    stderr = tmp_path / "0_log.err"
    stderr.write_text("some warning\nrewardflow: training aborted: 5 non-finite updates in a row\nsrun: error\n")
    return {"num": 0, "job_id": "41_0", "overrides": ["method=jagg"], "run_dir": str(run_dir), "stderr": str(stderr)}


def test_each_state_in_words(job):
    assert describe(job, SlurmState("PENDING", "Priority", attempts=1)) == "queued (Priority)"
    running = "running 37/150 steps, reward 0.5000, ETA 3m46s"  # 113 steps left x 2 s
    assert describe(job, SlurmState("RUNNING", attempts=2)) == f"{running}, requeued 1 time"
    assert describe(job, SlurmState("RUNNING", attempts=4)) == f"{running}, requeued 3 times"
    assert describe(job, SlurmState("FAILED", exit_code="1:0", attempts=1)) == (
        "failed (SLURM: FAILED, exit code 1:0) at 37/150 steps: rewardflow: training aborted: 5 non-finite updates "
        "in a row"
    )
    # Hydra's task wrapper catches the run's error: SLURM says COMPLETED, the task's log says failed
    assert describe(job, SlurmState("COMPLETED", attempts=1)).startswith(
        "failed (the run raised; SLURM: COMPLETED) at 37/150 steps: rewardflow: training aborted"
    )
    Path(job["stderr"]).write_text("a warning\n")
    assert describe(job, SlurmState("COMPLETED", attempts=1)) == "done (37/150 steps)"
    assert describe(job, SlurmState("CANCELLED", attempts=1)) == "cancelled at 37/150 steps"


def test_a_folder_that_is_not_a_slurm_sweep_is_a_message(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([str(tmp_path)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "slurm_jobs.json" in err and "local_jobs.json" in err


def test_a_traceback_is_summed_up_by_its_exception(job, tmp_path):
    stderr = tmp_path / "traceback.err"
    stderr.write_text(
        'rank 0 failed:\nTraceback (most recent call last):\n  File "x.py", line 1, in <module>\n'
        "RuntimeError: BrokenScorer: scoring failed\nsrun: error: rfnode1: task 0: Exited with exit "
        "code 1\n"
    )
    text = describe({**job, "stderr": str(stderr)}, SlurmState("COMPLETED", exit_code="0:0", attempts=1))
    assert text.endswith("at 37/150 steps: RuntimeError: BrokenScorer: scoring failed")
