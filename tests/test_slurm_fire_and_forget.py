"""``cluster.wait=false`` submits and returns; ``rewardflow-status`` follows the jobs to their end (issue 16;
docs/clusters.md#fire-and-forget). Needs the local SLURM cluster (`bash scripts/slurm_cluster.sh up`)."""

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


def status(sweep) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "launcher.cluster.sweep_status", str(sweep)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    return proc.stdout.splitlines()


def test_submit_and_return_then_follow_the_jobs_to_their_end(tmp_path):
    sweep = tmp_path / "sweep"
    start = time.monotonic()
    proc = run(
        [
            *SLURM,
            *SMALL,
            "cluster.wait=false",
            "trainer.steps=4",
            "logger=none",
            "reward._target_=rewards.color.ColorReward,fault_rewards.BrokenScorer",
            f"hydra.sweep.dir={sweep}",
        ],
        timeout=120,
        env_extra={"PYTHONPATH": str(ROOT / "tests"), "REWARDFLOW_ALLOW_CODE_OVERRIDES": "1"},
    )
    returned_after = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert returned_after < 30, f"the submit command took {returned_after:.1f} s"
    ids = re.search(r"submitted 2 SLURM job\(s\): (\S+), (\S+)", proc.stdout).groups()
    assert f"sweep dir: {sweep}" in proc.stdout and f"rewardflow-status {sweep}" in proc.stdout
    assert "rewardflow: sweep submitted" in proc.stdout and "Traceback" not in proc.stderr  # the sweep ended cleanly
    live = subprocess.run(
        ["squeue", "--noheader", "--format=%i", f"--jobs={','.join(ids)}"], capture_output=True, text=True
    ).stdout.split()
    assert live, "the jobs ended before the submit command returned: nothing was left running in the background"

    seen, deadline = [], time.monotonic() + 600
    while time.monotonic() < deadline:
        *lines, sweep_line = status(sweep)  # one line per point, then the sweep's
        assert sweep_line.startswith("sweep: 2 SLURM jobs (")
        seen.append(lines)
        if all(" done " in line or " failed " in line for line in lines):
            break
        time.sleep(3)
    good, broken = seen[-1]
    assert good.split()[1] == ids[0] and "done (4/4 steps)" in good and "rewards.color.ColorReward" in good
    assert " failed (" in broken and "RuntimeError: BrokenScorer: scoring failed on purpose" in broken
    states = {line.split()[2] for lines in seen for line in lines}  # queued (...), running k/N steps, done (...)
    assert states & {"queued", "running"}, seen  # followed while the jobs were still going
