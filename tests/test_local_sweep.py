"""Local sweeps you can follow (issue 29 item 1; docs/clusters.md#local-sweeps): ``rewardflow-status`` on a
``cluster=local`` sweep dir, ``--cancel`` of one point, points side by side with ``cluster.parallel``, and the
sweep's start and end lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from conftest import ROOT, processes_with_env, rewardflow_cmd, run_leaving_pipes
from launcher.cluster import local_jobs
from launcher.cluster.sweep_status import main as status_main

SMOKE = ["experiment=smoke", "logger=none", "trainer.export=false", "trainer.threads=1"]


def _run_dir(root: Path, num: int, steps: int, done: int, step_s: float = 2.0) -> str:
    run = root / str(num)
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text(f"trainer:\n  steps: {steps}\n")
    rows = [{"step": s, "reward/mean": 0.25 + s / 100, "time/step_s": step_s} for s in range(done)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(run)


def test_status_of_a_local_sweep_gives_each_points_state_step_and_the_sweeps_eta(tmp_path, capsys):
    me = local_jobs.process_record(os.getpid())  # a live process for the launcher and the running point
    gone = {"pid": 2**22 + 17, "pid_start": "1"}  # no such process
    points = [
        {"num": 0, "state": "done", "steps": 4, **me},
        {"num": 1, "state": "running", "steps": 10, **me},
        {"num": 2, "state": "queued", "steps": 10},
        {"num": 3, "state": "failed", "steps": 10, "reason": "rewardflow: training aborted", **me},
        {"num": 4, "state": "running", "steps": 10, **gone},
    ]
    done = {0: 4, 1: 4, 2: 0, 3: 2, 4: 3}
    for p in points:
        p.update(
            overrides=[f"trainer.seed={p['num']}"], run_dir=_run_dir(tmp_path, p["num"], p["steps"], done[p["num"]])
        )
    local_jobs.write_jobs(tmp_path, {"launcher": {**me, "parallel": 2}, "points": points})

    status_main([str(tmp_path)])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("  0  done (4/4 steps, reward 0.2800)")
    assert "running 4/10 steps, reward 0.2800, ETA 12s" in lines[1]  # 6 steps left x 2 s
    assert "queued" in lines[2] and "[trainer.seed=2]" in lines[2]
    assert "failed at 2/10 steps: rewardflow: training aborted" in lines[3]
    assert "stopped at 3/10 steps: its process is gone" in lines[4]
    # left: 12 s (point 1) + 20 s (point 2, at the others' 2 s/step), 2 at a time -> max(20, 32 / 2) = 20 s
    assert (
        lines[5]
        == f"sweep: 5 points (1 done, 1 running, 1 queued, 1 failed, 1 stopped) | 2 at a time, pid {os.getpid()} | ETA 20s"
    )


def test_cancel_of_an_unknown_point_is_a_message(tmp_path, capsys):
    me = local_jobs.process_record(os.getpid())
    point = {"num": 0, "state": "queued", "overrides": [], "run_dir": str(tmp_path / "0")}
    local_jobs.write_jobs(tmp_path, {"launcher": {**me, "parallel": 1}, "points": [point]})
    with pytest.raises(SystemExit) as exit_:
        status_main([str(tmp_path), "--cancel", "3"])
    assert exit_.value.code == 2 and "no point 3 in this sweep" in capsys.readouterr().err


def _sweep(args: list[str], sweep: Path) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_SILENT": "true"}
    return subprocess.Popen(
        [*rewardflow_cmd(), "-m", *SMOKE, *args, f"hydra.sweep.dir={sweep}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _status(sweep: Path, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "launcher.cluster.sweep_status", str(sweep), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.slow
def test_cancel_one_point_the_others_go_on_and_the_sweep_prints_where_it_is(tmp_path):
    sweep = tmp_path / "sweep"
    proc = _sweep(["trainer.steps=400,2", "trainer.ckpt_every=0"], sweep)
    metrics = sweep / "0" / "metrics.jsonl"
    deadline = time.monotonic() + 240
    while not (metrics.exists() and metrics.read_text().count("\n") >= 1):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
        time.sleep(0.5)
    running = _status(sweep)
    assert "  0  running " in running and "  1  queued" in running and "| 1 at a time," in running

    after = _status(sweep, "--cancel", "0")
    assert "cancelling point(s) 0" in after and "  0  cancelled at " in after
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]  # a point cancelled on request is not the sweep's failure
    assert (sweep / "0" / "checkpoints").is_dir()  # it checkpointed before it stopped
    final = _status(sweep)
    assert "  1  done (2/2 steps" in final and "(1 cancelled, 1 done)" in final
    lines = out.splitlines()
    assert lines[0] == f"rewardflow: sweep of 2 points (1 at a time, cluster=local) | sweep dir: {sweep}"
    assert lines[1] == f"  follow it: rewardflow-status {sweep} --watch"
    assert lines[-3:] == [
        f"rewardflow: sweep ended | sweep dir: {sweep}",
        f"  each point: rewardflow-status {sweep}",
        f"  compare them: rewardflow-compare {sweep}",
    ]
    assert any(line.startswith("rewardflow: point 0 cancelled (") for line in lines)


@pytest.mark.slow
def test_parallel_points_run_side_by_side(tmp_path):
    sweep = tmp_path / "sweep"
    marker = f"REWARDFLOW_TEST_MARK={uuid.uuid4().hex}"
    args = ["-m", *SMOKE, "trainer.seed=0,1", "trainer.steps=2", "cluster.parallel=2", f"hydra.sweep.dir={sweep}"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_SILENT": "true", **dict([marker.split("=", 1)])}
    proc = run_leaving_pipes([*rewardflow_cmd(), *args], tmp_path, env)
    out, err = proc.stdout, proc.stderr
    assert proc.returncode == 0, err[-3000:]
    assert not processes_with_env(marker)  # the points' fork server ended with the sweep (it held the pipes open)
    first, second = local_jobs.read_jobs(sweep)["points"]
    assert first["state"] == second["state"] == "done"
    # overlapping lifetimes: each point started before the other ended
    assert first["started"] < second["ended"] and second["started"] < first["ended"]
    assert "[0] " in out and "[1] " in out  # side by side, each line says whose it is


def test_a_bad_parallel_names_the_key(tmp_path):
    proc = subprocess.run(
        [*rewardflow_cmd(), "-m", *SMOKE, "cluster.parallel=0", f"hydra.sweep.dir={tmp_path / 's'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert proc.returncode == 2 and "cluster.parallel" in proc.stderr and "must be >= 1" in proc.stderr


def test_a_slow_run_logs_a_step_line_at_least_once_a_minute(monkeypatch, caplog):
    from launcher.tracking import step_log

    now = [1000.0]
    monkeypatch.setattr(step_log.time, "monotonic", lambda: now[0])
    log = step_log.StepLog(every=10, total_steps=10, bar_shown=False)
    with caplog.at_level("INFO", logger="rewardflow"):
        for step in range(10):
            now[0] += 25.0  # 25 s a step
            log({"step": step, "reward/mean": 0.5, "time/step_s": 25.0})
    logged = [r.getMessage().split(" | ")[0] for r in caplog.records]
    assert logged == [
        "step 0 (1/10 done)",
        "step 3 (4/10 done)",
        "step 6 (7/10 done)",
        "step 9 (10/10 done)",
    ]  # first, every >= 60 s, last
