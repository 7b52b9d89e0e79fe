"""A real local multirun through the CLI, with real W&B offline files read back (issue 2 acceptance)."""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import ROOT, rewardflow_cmd
from launcher.tracking.wandb_offline import find_offline_runs, read_offline_run
from test_train_e2e import METRICS

pytestmark = pytest.mark.slow


def test_three_method_sweep_logs_every_metric_to_wandb_offline(tmp_path):
    proc = subprocess.run(
        [
            *rewardflow_cmd(),
            "-m",
            "method=dance_grpo,flow_grpo,flow_grpo_fast",
            "trainer.steps=3",
            f"output_root={tmp_path}",
            "trainer.progress=false",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    sweeps = list((tmp_path / "train" / "multiruns").iterdir())
    assert len(sweeps) == 1
    runs = find_offline_runs(sweeps[0])
    assert len(runs) == 3, runs
    seen = set()
    for folder in runs:
        run = read_offline_run(folder)
        method = run.config["method"]["name"]
        seen.add(method)
        steps = [row["step"] for row in run.history if "reward/mean" in row]
        assert steps == [0, 1, 2], (method, steps)
        for row in (r for r in run.history if "reward/mean" in r):
            assert not [k for k in METRICS if k not in row], (method, row.keys())
        assert run.group == f"sweep-{sweeps[0].name}"
        assert method in run.tags and "tiny_flux" in run.tags and "color" in run.tags
        assert run.config["model"]["name"] == "tiny_flux" and run.config["trainer"]["steps"] == 3
        defined = {m["name"] for m in run.metrics}
        assert {"time/wallclock_s", "time/gpu_hours"} <= defined
        # the same numbers are in the run directory's metrics.jsonl
        job_dir = folder.parents[1]
        rows = [json.loads(l) for l in (job_dir / "metrics.jsonl").read_text().splitlines()]
        assert [r["reward/mean"] for r in rows if "reward/mean" in r] == pytest.approx(run.series("reward/mean"))
        # the demo's held-out evaluation (step 0 and the end) reaches W&B at its steps, with its image grid
        evals = {r["step"]: r["eval/color/mean"] for r in rows if "eval/color/mean" in r}
        logged = {row["step"]: row["eval/color/mean"] for row in run.history if "eval/color/mean" in row}
        assert sorted(evals) == [0, 3] and logged == pytest.approx(evals)
        assert any("eval/samples" in k for row in run.history for k in row)
        assert (job_dir / "reward_curve.png").exists() and (job_dir / "samples" / "step_00000.png").exists()
    assert seen == {"dance_grpo", "flow_grpo", "flow_grpo_fast"}
