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
    assert "not a number" in (stray_process_group("local") or "")
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
