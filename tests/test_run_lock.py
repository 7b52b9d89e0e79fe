"""One run per run dir (issue 16): two concurrent starts in one run dir leave one run and one clear error; a lock
whose holder is gone (a crashed process, an earlier attempt of a requeued SLURM job on another node, a silent
host) is taken over, and two starts that both find it stale cannot both take it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import ROOT, rewardflow_cmd
from launcher.checkpoint.run_lock import LOCK_NAME, STALE_AFTER_S, RunDirBusy, RunLock, lock_before_start, lock_run_dir
from rewardflow.distributed import World

HOLD = textwrap.dedent("""
    import pathlib, sys, time
    from launcher.checkpoint.run_lock import RunDirBusy, RunLock
    run_dir, go = sys.argv[1], pathlib.Path(sys.argv[2])
    print("READY", flush=True)
    while not go.exists():
        time.sleep(0.01)
    try:
        RunLock(run_dir).acquire()
    except RunDirBusy:
        print("BUSY", flush=True)
        sys.exit(0)
    print("HELD", flush=True)
    time.sleep(60)
""")


def start_holders(run_dir, n, tmp_path):
    """``n`` processes that take the lock at the same instant; returns them once each has reported."""
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", HOLD, str(run_dir), str(go)], cwd=ROOT, stdout=subprocess.PIPE, text=True
        )
        for _ in range(n)
    ]
    assert all(p.stdout.readline().strip() == "READY" for p in procs)
    go.touch()
    outcomes = [p.stdout.readline().strip() for p in procs]
    return procs, outcomes


def holder_of(run_dir) -> dict:
    return json.loads((run_dir / LOCK_NAME).read_text())


def write_lock(run_dir, age_s=0.0, **fields):
    """A lock file as another process would have left it, last refreshed ``age_s`` seconds ago."""
    holder = {
        "host": "node-b",
        "pid": 4242,
        "pid_start": None,
        "job": None,
        "attempt": 0,
        "started": "2026-11-30 08:00:00",
        "token": "0" * 32,
        **fields,
    }
    path = run_dir / LOCK_NAME
    path.write_text(json.dumps(holder))
    t = time.time() - age_s
    os.utime(path, (t, t))


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_a_live_holder_is_named_and_a_crashed_holders_lock_is_taken_over(tmp_path):
    procs, outcomes = start_holders(tmp_path, 1, tmp_path)
    holder = procs[0]
    try:
        assert outcomes == ["HELD"]
        with pytest.raises(RunDirBusy) as err:
            RunLock(tmp_path).acquire()
        msg = str(err.value)
        assert f"hydra.run.dir={tmp_path}" in msg and f"host {socket.gethostname()}, pid {holder.pid}" in msg
        assert f"kill {holder.pid}" in msg  # the fix for a holder on this host
        holder.kill()  # a crash: the lock file stays behind
        holder.wait(timeout=30)
        assert holder_of(tmp_path)["pid"] == holder.pid
        lock = RunLock(tmp_path).acquire()  # the holder is gone: taken over
        assert holder_of(tmp_path)["pid"] == os.getpid()
        lock.release()
        assert not (tmp_path / LOCK_NAME).exists()
    finally:
        holder.kill()


def test_two_starts_that_find_a_stale_lock_cannot_both_take_it(tmp_path):
    write_lock(tmp_path, host=socket.gethostname(), pid=dead_pid())
    procs, outcomes = start_holders(tmp_path, 3, tmp_path)
    try:
        assert sorted(outcomes) == ["BUSY", "BUSY", "HELD"], outcomes
        winner = procs[outcomes.index("HELD")]
        assert holder_of(tmp_path)["pid"] == winner.pid
    finally:
        for p in procs:
            p.kill()


def test_another_hosts_lock_is_busy_while_it_beats_and_stale_once_silent(tmp_path):
    write_lock(tmp_path, age_s=5)
    with pytest.raises(RunDirBusy, match="host node-b, pid 4242") as err:
        RunLock(tmp_path).acquire()
    assert f"once silent for 10 min, or delete {tmp_path / LOCK_NAME}" in str(err.value)
    write_lock(tmp_path, age_s=STALE_AFTER_S + 60)
    lock = RunLock(tmp_path).acquire()
    assert holder_of(tmp_path)["token"] == lock.me["token"]
    lock.release()


@pytest.mark.parametrize(
    "env,job",
    [
        ({"SLURM_JOB_ID": "777"}, "777"),
        ({"SLURM_JOB_ID": "701", "SLURM_ARRAY_JOB_ID": "700", "SLURM_ARRAY_TASK_ID": "3"}, "700_3"),
    ],
)
def test_an_earlier_attempt_of_the_same_requeued_slurm_job_on_another_node_is_taken_over(
    env, job, tmp_path, monkeypatch
):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    write_lock(tmp_path, age_s=5, job=job, attempt=0)  # on node-b, heartbeat fresh: the node just died
    monkeypatch.setenv("SLURM_RESTART_COUNT", "0")  # the same attempt elsewhere is not an earlier one
    with pytest.raises(RunDirBusy, match=f"SLURM job {job}"):
        RunLock(tmp_path).acquire()
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")  # the requeued attempt
    lock = RunLock(tmp_path).acquire()
    assert holder_of(tmp_path)["attempt"] == 1 and holder_of(tmp_path)["job"] == job
    lock.release()
    write_lock(tmp_path, age_s=5, job="778", attempt=0)  # another job's lock is not this job's to take
    with pytest.raises(RunDirBusy):
        RunLock(tmp_path).acquire()


def test_the_heartbeat_notices_a_lock_taken_by_another_process(tmp_path, monkeypatch):
    monkeypatch.setattr("launcher.checkpoint.run_lock.HEARTBEAT_S", 0.05)
    lock = RunLock(tmp_path).acquire()
    write_lock(tmp_path, age_s=0)  # replaced behind its back
    deadline = time.time() + 10
    while lock.lost is None and time.time() < deadline:
        time.sleep(0.05)
    assert lock.lost is not None and "node-b" in lock.lost
    lock.release()
    assert holder_of(tmp_path)["host"] == "node-b"  # release never removes another holder's lock


def test_the_trainer_adopts_the_lock_its_cli_took(tmp_path, caplog):
    """A single-process CLI locks before its slow imports; the trainer takes that lock over silently, and a second
    trainer in the same process (a later run) takes over the first's with a warning."""
    lock_before_start(tmp_path)
    token = holder_of(tmp_path)["token"]
    with caplog.at_level("WARNING"):
        lock = lock_run_dir(tmp_path, World())
    assert lock.me["token"] == token == holder_of(tmp_path)["token"] and not caplog.records
    with caplog.at_level("WARNING"):
        later = lock_run_dir(tmp_path, World())
    assert "earlier run in this same process" in caplog.text and not lock.held
    later.release()
    assert not (tmp_path / LOCK_NAME).exists()


@pytest.mark.slow
def test_two_concurrent_starts_in_one_run_dir(tmp_path):
    """The acceptance test: both commands start at once in the same run dir; one trains, the other stops at once
    with a message naming the holder, and the run dir holds one run's rows."""
    run_dir = tmp_path / "run"
    args = [
        *rewardflow_cmd(),
        "experiment=smoke",
        "logger=none",
        "trainer.steps=2",
        "trainer.threads=1",
        "trainer.export=false",
        f"hydra.run.dir={run_dir}",
    ]
    procs = [
        subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)
    ]
    results = [(p, *p.communicate(timeout=900)) for p in procs]
    codes = sorted(p.returncode for p, _, _ in results)
    assert codes == [0, 2], [(p.returncode, err[-2000:]) for p, _, err in results]
    ((winner, _, _),) = [r for r in results if r[0].returncode == 0]
    ((_, _, err),) = [r for r in results if r[0].returncode == 2]
    assert "is in use by another rewardflow run" in err and f"pid {winner.pid}" in err
    assert f"hydra.run.dir={run_dir}" in err and "Traceback" not in err
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1]
    assert not (run_dir / LOCK_NAME).exists()  # released at the end


def test_releasing_the_lock_of_a_run_dir_already_deleted_is_quiet(tmp_path):
    """A run in a temporary dir (benchmarks, tests) releases its lock at exit, after the dir is gone."""
    import shutil

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    lock = RunLock(run_dir).acquire()
    shutil.rmtree(run_dir)
    lock.release()  # no FileNotFoundError from the take-over mutex
    assert not lock.held
