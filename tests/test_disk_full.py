"""A disk that fills up mid-run (issue 26 acceptance, docs/resume.md#torn-files): on a small tmpfs the run ends with
one line naming the path, and once space is freed the same command resumes and every step is logged once. Skipped
only where a tmpfs cannot be mounted (no privilege)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid

import pytest

from conftest import ROOT, rewardflow_cmd
from rewardflow.jsonl import read_rows

RUN = ["experiment=smoke", "logger=none", "trainer.ckpt_every=1", "trainer.export=false", "trainer.log_every=1"]


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / f"disk-{uuid.uuid4().hex[:6]}"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def _steps(run_dir):
    return [int(r["step"]) for r in read_rows(run_dir / "metrics.jsonl")]


@pytest.mark.slow
def test_a_full_disk_mid_run_ends_with_one_line_and_the_resume_loses_no_step(small_disk):
    run_dir = small_disk / "run"
    cmd = [*rewardflow_cmd(), *RUN, f"hydra.run.dir={run_dir}", "trainer.steps=400"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    deadline = time.monotonic() + 600
    while (not (run_dir / "metrics.jsonl").exists() or len(_steps(run_dir)) < 3) and time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.2)
    filler = small_disk / "filler"
    with open(filler, "wb") as fh:  # take every free byte: the next checkpoint or row cannot be written
        try:
            while True:
                fh.write(b"\0" * (1 << 16))
                fh.flush()
        except OSError:
            pass
    _, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 1, stderr[-3000:]
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    assert "Traceback" not in stderr and len(lines) == 1, stderr[-3000:]
    assert "No space left on device (errno 28)" in lines[0] and str(run_dir) in lines[0]
    assert not any(p.stat().st_size == 0 for p in run_dir.glob("*.png"))
    filler.unlink()
    last = _steps(run_dir)[-1]
    again = subprocess.run([*cmd[:-1], f"trainer.steps={last + 3}"], cwd=ROOT, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr[-3000:]
    assert _steps(run_dir) == list(range(last + 3))  # every step once, none lost
    shutil.rmtree(run_dir, ignore_errors=True)
    assert os.path.ismount(small_disk)
