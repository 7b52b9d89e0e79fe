"""cluster=local_multi: the multi-rank code path (submitit local executor, gloo, FSDP2) without SLURM."""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import ROOT, rewardflow_cmd
from launcher.tracking.wandb_offline import find_offline_runs, read_offline_run

pytestmark = pytest.mark.slow


def test_two_local_ranks_train_one_logged_run(tmp_path):
    proc = subprocess.run(
        [
            *rewardflow_cmd(),
            "cluster=local_multi",
            "cluster.tasks_per_node=2",
            "experiment=smoke",
            "trainer.steps=3",
            f"output_root={tmp_path}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (job,) = [p for p in next((tmp_path / "train" / "multiruns").iterdir()).iterdir() if p.name == "0"]
    log = (job / "rewardflow.log").read_text()
    assert "rank 0/2" in log and "rank 1/2" in log and "on 2 rank(s)" in log
    rows = [json.loads(l) for l in (job / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]  # rank 0 alone writes
    # smoke: 2 prompts x 2 generations over 2 ranks, 6 steps, 3 trained: pass counts are summed over ranks
    assert all(r["count/transformer_fwd"] == 4 * 6 + 4 * 3 and r["count/transformer_bwd"] == 4 * 3 for r in rows)
    (run_dir,) = find_offline_runs(job)
    assert [r["step"] for r in read_offline_run(run_dir).history if "reward/mean" in r] == [0, 1, 2]
    assert (job / "checkpoints" / "step_00000002" / "COMPLETE").exists()
