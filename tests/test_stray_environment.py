"""Stray process-group variables (issue 26 item 6, docs/clusters.md#local-runs): ``WORLD_SIZE=2`` left in the
environment of a ``cluster=local`` run is refused in seconds with a message, not a wait for ranks that never come;
torchrun's and submitit's own environments are left alone."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from conftest import ROOT, rewardflow_cmd
from launcher.cluster.device_check import stray_process_group

STRAY = {"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29531"}


@pytest.fixture
def stray_env(monkeypatch):
    for k in ("TORCHELASTIC_RUN_ID", "SUBMITIT_EXECUTOR", "SUBMITIT_LOCAL_JOB_ID"):
        monkeypatch.delenv(k, raising=False)
    for k, v in STRAY.items():
        monkeypatch.setenv(k, v)
    return monkeypatch


def test_stray_variables_contradict_cluster_local_only(stray_env):
    problem = stray_process_group("local")
    assert problem and "WORLD_SIZE=2" in problem and "MASTER_PORT=29531" in problem and "Fix" in problem
    assert stray_process_group("local_multi") is None and stray_process_group("slurm") is None
    stray_env.setenv("TORCHELASTIC_RUN_ID", "abc")  # torchrun started this process: its ranks exist
    assert stray_process_group("local") is None
    stray_env.delenv("TORCHELASTIC_RUN_ID")
    stray_env.setenv("WORLD_SIZE", "two")
    assert "WORLD_SIZE='two' is not a whole number >= 1" in (stray_process_group("local") or "")
    stray_env.setenv("WORLD_SIZE", "1")
    assert stray_process_group("local") is None


def test_the_cli_refuses_them_in_seconds(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("TORCHELASTIC_RUN_ID", "SUBMITIT_EXECUTOR")}
    t0 = time.monotonic()
    proc = subprocess.run(
        [*rewardflow_cmd(), "experiment=smoke", f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=ROOT,
        env={**env, **STRAY},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "WORLD_SIZE=2" in proc.stderr and "cluster=local_multi" in proc.stderr and "Traceback" not in proc.stderr
    assert time.monotonic() - t0 < 120  # the interpreter's start and Hydra's composition, no rendezvous
    assert not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.parametrize(
    "env,says",
    [
        ({"LOCAL_WORLD_SIZE": "abc"}, "LOCAL_WORLD_SIZE='abc' is not a whole number >= 1"),
        ({"LOCAL_WORLD_SIZE": "0"}, "LOCAL_WORLD_SIZE='0' is not a whole number >= 1"),
        ({"RANK": "-1"}, "RANK='-1' is not a whole number >= 0"),
        ({"WORLD_SIZE": "2", "RANK": "2"}, "RANK=2 is not below WORLD_SIZE=2"),
        ({"LOCAL_WORLD_SIZE": "2", "LOCAL_RANK": "5"}, "LOCAL_RANK=5 is not below LOCAL_WORLD_SIZE=2"),
        ({"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "4"}, "LOCAL_WORLD_SIZE=4 exceeds WORLD_SIZE=2"),
        ({"MASTER_PORT": "70000"}, "MASTER_PORT=70000 is not a port"),
        ({"WORLD_SIZE": "4", "RANK": "3", "LOCAL_WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_PORT": "29500"}, None),
    ],
)
def test_process_group_values_are_checked(env, says):
    """Every process-group variable the launcher reads (the trainer's thread count reads LOCAL_WORLD_SIZE) is a
    whole number in range, or a message naming it; a consistent torchrun environment passes."""
    from launcher.cluster.env_check import process_group_problem

    problem = process_group_problem(env)
    assert problem == says if says is None else (problem and says in problem and "Fix" in problem), problem


def test_a_bad_local_world_size_is_a_message_on_the_command_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in STRAY}
    proc = subprocess.run(
        [*rewardflow_cmd(), "trainer.steps=1", f"hydra.run.dir={tmp_path}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**env, "LOCAL_WORLD_SIZE": "eight"},
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "LOCAL_WORLD_SIZE='eight'" in proc.stderr and not (tmp_path / "metrics.jsonl").exists()
