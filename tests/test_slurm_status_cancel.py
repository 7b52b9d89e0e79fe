"""``rewardflow-status`` on a live ``cluster=slurm`` sweep prints every point's state and step, and ``--cancel``
leaves none of its jobs in ``squeue`` (issue 29 item 1; docs/clusters.md#following-a-sweep). Needs the local SLURM
cluster (`bash scripts/slurm_cluster.sh up`), as tests/test_slurm_fire_and_forget.py."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest

from conftest import ROOT
from slurm_support import SLURM, SMALL, run, slurm_up

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not slurm_up(), reason="no SLURM cluster: `bash scripts/slurm_cluster.sh up` (root, Debian)"),
]


def status(sweep, *args: str) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "launcher.cluster.sweep_status", str(sweep), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    return proc.stdout.splitlines()


def squeue(ids) -> list[str]:
    return subprocess.run(
        ["squeue", "--noheader", "--format=%i", f"--jobs={','.join(ids)}"], capture_output=True, text=True
    ).stdout.split()


def test_status_of_a_live_slurm_sweep_then_cancel_leaves_no_job(tmp_path):
    sweep = tmp_path / "sweep"
    proc = run(
        [*SLURM, *SMALL, "cluster.wait=false", "trainer.steps=2000", "trainer.seed=0,1", "logger=none"]
        + [f"hydra.sweep.dir={sweep}"],
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    ids = re.search(r"submitted 2 SLURM job\(s\): (\S+), (\S+)", proc.stdout).groups()
    assert f"sweep dir: {sweep}" in proc.stdout and f"rewardflow-compare {sweep}" in proc.stdout

    deadline, lines = time.monotonic() + 300, []
    while time.monotonic() < deadline:  # until a point has logged a step
        lines = status(sweep)
        if any(re.search(r"running [1-9]\d*/2000 steps, reward ", line) for line in lines):
            break
        time.sleep(3)
    points = lines[:-1]
    assert len(points) == 2 and lines[-1].startswith("sweep: 2 SLURM jobs ("), lines
    for line, job in zip(points, ids):
        assert line.split()[1] == job and re.search(r" (queued|running (\d+/2000 steps|start-up))", line), line
    assert "ETA" in lines[-1]

    after = status(sweep, "--cancel", "--timeout", "120")
    assert after[0] == f"cancelling the whole sweep: scancel {' '.join(ids)}", after
    deadline = time.monotonic() + 60
    while squeue(ids) and time.monotonic() < deadline:
        time.sleep(1)
    assert squeue(ids) == []
    assert all(" running " not in line and " queued" not in line for line in status(sweep)[:-1])
