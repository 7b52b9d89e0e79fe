"""The launcher on a real SLURM cluster (scripts/slurm_cluster.sh up), one node per job (either node of the test
cluster): sweeps of multi-rank FSDP2 jobs, preemption and time-limit requeues that resume bitwise, and a dying rank
that fails its job promptly; rewardflow-eval as a 2-rank job. Jobs across nodes: tests/test_slurm_multinode.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

from conftest import ROOT, rewardflow_cmd
from slurm_support import (
    LONG,
    SLURM,
    SMALL,
    assert_same_as_reference,
    job_dirs,
    rows,
    run,
    slurm_up,
    wait_for_step,
    wandb_steps,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not slurm_up(),
        reason="no SLURM cluster: `bash scripts/slurm_cluster.sh up` (root, Debian; scripts/test.sh "
        "does it) starts one",
    ),
]


def test_two_method_sweep_of_two_rank_fsdp2_jobs(tmp_path):
    proc = run(
        [
            "-m",
            *SLURM,
            "method=dance_grpo,flow_grpo_fast",
            "model=tiny_flux",
            "trainer.steps=3",
            f"output_root={tmp_path}",
        ],
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = job_dirs(tmp_path)
    assert len(jobs) == 2
    for job in jobs:
        log = (job / "rewardflow.log").read_text()
        assert "rank 1/2" in log and "on 2 rank(s)" in log  # 2 FSDP2 ranks over gloo
        ids, steps = wandb_steps(job)
        assert len(ids) == 1 and steps == [0, 1, 2]
        assert [r["step"] for r in rows(job) if "reward/mean" in r] == [0, 1, 2]
        # the demo's held-out evaluation, both ranks sampling their shares: the base model and the end
        assert [r["step"] for r in rows(job) if "eval/color/mean" in r] == [0, 3]


def test_preempted_job_is_requeued_and_resumes_bitwise(tmp_path, slurm_reference):
    import submitit

    with open(tmp_path / "stdout", "w") as out, open(tmp_path / "stderr", "w") as err:
        proc = subprocess.Popen(
            [*rewardflow_cmd(), "-m", *SLURM, *LONG, f"output_root={tmp_path}"],
            cwd=ROOT,
            stdout=out,
            stderr=err,
            text=True,
        )
    job = wait_for_step(tmp_path, 60, proc)  # after the step-49 checkpoint
    ids = sorted(p.name for p in (job.parent / ".submitit").iterdir() if re.fullmatch(r"\d+(_\d+)?", p.name))
    job_id = ids[-1]  # "<id>" for a single job, "<array id>_<index>" in an array
    submitit.SlurmJob(folder=job.parent / ".submitit" / "%j", job_id=job_id)._interrupt()  # SIGTERM then USR2
    proc.wait(timeout=600)
    assert proc.returncode == 0, (tmp_path / "stderr").read_text()[-3000:]
    log = (job / "rewardflow.log").read_text()
    assert "will checkpoint at the end of this step" in log and "resuming at step" in log
    assert_same_as_reference(job, slurm_reference)


def test_time_limit_requeues_until_done_and_resumes_bitwise(tmp_path, slurm_reference):
    # 1-minute jobs with the signal 30 s before the limit: the run needs more than one allocation
    # SLURM signals a 1-minute job 0-30 s after it starts (it checks limits every 30 s); on a time-limit signal the
    # trainer keeps going for half of signal_delay_s, then checkpoints and requeues. 100 steps need several jobs.
    proc = run(
        [
            "-m",
            *SLURM,
            *SMALL,
            "trainer.steps=100",
            "trainer.ckpt_every=50",
            "cluster.timeout_min=1",
            "cluster.signal_delay_s=30",
            "method._target_=slurm_faults.SlowDanceGRPO",  # >= 60 s of steps: never done within one job
            f"output_root={tmp_path}",
        ],
        timeout=1200,
        env_extra={
            "PYTHONPATH": f"{ROOT / 'tests'}:{os.environ.get('PYTHONPATH', '')}",
            "REWARDFLOW_ALLOW_CODE_OVERRIDES": "1",
        },
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    job = job_dirs(tmp_path)[0]
    assert (job / "rewardflow.log").read_text().count("resuming at step") >= 1
    assert_same_as_reference(job, slurm_reference, steps=100)


def test_a_dying_rank_fails_the_job_promptly_and_the_sweep_reports_it(tmp_path):
    t0 = time.monotonic()
    proc = run(
        [
            "-m",
            *SLURM,
            *SMALL,
            "trainer.steps=20",
            "method._target_=slurm_faults.CrashOnRank1",
            f"output_root={tmp_path}",
        ],
        timeout=600,
        env_extra={
            "PYTHONPATH": f"{ROOT / 'tests'}:{os.environ.get('PYTHONPATH', '')}",
            "REWARDFLOW_ALLOW_CODE_OVERRIDES": "1",
        },
    )
    elapsed = time.monotonic() - t0
    assert proc.returncode != 0
    assert "rank 1 crashed on purpose" in proc.stdout + proc.stderr
    assert elapsed < 180, elapsed


def test_the_eval_command_runs_as_a_two_rank_slurm_job(tmp_path):
    """`rewardflow-eval -m cluster=slurm` (issue 28 item 3: it runs on SLURM like a training job): one job of 2
    ranks scores the demo's base model with the held-out prompts sharded over the ranks, and its eval.json holds, bit
    for bit, the scores one process computes (tests/test_evaluate_cli.py checks the same with ranks spawned here)."""
    from launcher.config import compose
    from launcher.evaluate_cli import RESULTS_FILE
    from launcher.evaluate_cli import run as evaluate
    from test_evaluate_cli import SHARDED

    single = evaluate(compose(SHARDED, config_name="evaluate"), tmp_path / "single")
    proc = subprocess.run(
        [sys.executable, "-m", "launcher.evaluate_cli", "-m", *SLURM, *SHARDED, f"output_root={tmp_path / 'slurm'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (results,) = (tmp_path / "slurm").rglob(RESULTS_FILE)
    assert results.parent.parent.parent.parent.name == "evaluate"  # <output_root>/evaluate/multiruns/<time>/0
    written = json.loads(results.read_text())
    assert (single["world_size"], written["world_size"]) == (1, 2)
    assert [r["metrics"] for r in written["results"]] == [r["metrics"] for r in single["results"]]  # float equality
    log = (results.parent / "rewardflow.log").read_text()
    assert "rank 1/2" in log, log[-2000:]
