"""Signals in a local run (issue 26 item 5, docs/resume.md#signals): SIGTERM, SIGUSR1, SIGUSR2 or SIGINT end the
step in progress, write its checkpoint, finish the W&B run and release the run dir's lock, and the process exits with
128 + the signal's number and one line, as a submitit task does on preemption; the same command then continues."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest

from conftest import ROOT, rewardflow_cmd
from launcher.tracking.wandb_offline import find_offline_runs, read_offline_run
from rewardflow.jsonl import read_rows

RUN = ["experiment=smoke", "trainer.ckpt_every=0", "trainer.export=false", "trainer.log_every=1"]


def _steps(run_dir):
    return [int(r["step"]) for r in read_rows(run_dir / "metrics.jsonl") if "reward/mean" in r]


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_checkpoints_the_step_in_progress_and_the_run_continues(sig, tmp_path):
    run_dir = tmp_path / "run"
    cmd = [*rewardflow_cmd(), *RUN, f"hydra.run.dir={run_dir}"]
    proc = subprocess.Popen([*cmd, "trainer.steps=500"], cwd=ROOT, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 600
    while len(_steps(run_dir)) < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.5)
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 128 + sig, stderr[-3000:]
    assert f"stopped by {sig.name}" in stderr and "Traceback" not in stderr
    steps = _steps(run_dir)
    (checkpoint,) = (run_dir / "checkpoints").glob("step_*")  # ckpt_every=0: only the signal's checkpoint
    assert json.loads((checkpoint / "meta.json").read_text())["step"] == steps[-1]
    assert not (run_dir / "rewardflow.lock").exists()
    (folder,) = find_offline_runs(run_dir)
    assert read_offline_run(folder).exit_code == 0  # the W&B run was finished, not left running
    last = steps[-1]
    again = subprocess.run([*cmd, f"trainer.steps={last + 3}"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert _steps(run_dir) == list(range(last + 3))  # every step once
