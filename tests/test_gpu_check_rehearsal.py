"""The GPU check's CPU rehearsal (issue 27, item 7): ``scripts/gpu_check.py --cpu-rehearsal`` runs the trainer
sections end to end through the same code a GPU run takes, on the CPU at tiny sizes, and prints every section item 7
names: (a) the twins' equality, (b) per fine-tuning mode memory measured vs planned, synchronised seconds, MFU
against the spec peak and the matmul ceiling, host syncs, first-update ratios, a DCP save and resume, (c) the JSON
and the dated table."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

HEADINGS = (
    "== (a) equality",
    "== (b) trainer at FLUX.1 width: DanceGRPO lora",
    "== (b) trainer at FLUX.1 width: DanceGRPO full",
    "memory per phase (GiB)",
    "CPU stand-in: no per-phase allocator peak",
    "seconds per phase (synchronised",
    "vs spec peak n/a TFLOP/s (n/a on CPU",
    "vs measured float32 matmul ceiling",
    "host syncs (counted on cpu)",
    "first-update ratios |rho - 1|",
    "DCP save and resume: step 1 saved",
    "== (c) report: gpu_check.json and gpu_check_table.md",
    "### GPU check, ",
)


def test_cpu_rehearsal_prints_every_section_and_writes_the_report(tmp_path, twin_cache):
    from models.tiny_flux import materialize_tiny_flux

    materialize_tiny_flux()  # the session's twin (shared with the other tests), not the check's time
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("OUT", None)
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--cpu-rehearsal", "--out", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    print(f"rehearsal: {time.monotonic() - t0:.0f} s")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    for heading in HEADINGS:
        assert heading in proc.stdout, heading

    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["profile"] == "cpu-rehearsal" and report["device"] == "cpu"
    assert report["date"][:4].isdigit() and set(report["sections"]) == {"ceilings", "equality", "trainer"}
    assert all(status == "ok" for status in report["sections"].values()), report["sections"]
    assert report["ceilings"]["matmul bf16 256^3"] > 0

    (eq,) = report["equality"]  # the CPU against itself: exactly equal
    assert eq["within_tolerance"] and eq["tolerance"] == 0.0
    assert eq["reward_abs_diff"] == eq["loss_abs_diff"] == eq["weights_rel_diff"] == 0.0

    assert set(report["trainer"]) == {"lora", "full"}
    for mode, r in report["trainer"].items():
        assert r["blocks"] == [2, 4] and r["skipped_updates"] == 0, mode  # the most the profile allows fit
        assert r["trainable_b"] < r["params_b"] if mode == "lora" else r["trainable_b"] == r["params_b"]
        mem = r["memory"]
        assert mem["measured"] is None  # no per-phase peak on the CPU: the plan stands in
        assert 0 < mem["planned"]["rollout"] <= mem["planned"]["peak"] and 0 < mem["planned"]["update"]
        assert "model.activation_checkpointing" in mem["plan_choices"]
        assert all(r["seconds"][p] > 0 for p in ("rollout", "reward", "update", "step"))
        assert r["seconds"]["step"] >= r["seconds"]["rollout"] + r["seconds"]["update"] - 1e-6
        flop = r["flop"]
        assert 0 < flop["step_transformer"] <= flop["step_total"]
        assert flop["phase_transformer"]["rollout"] > 0 and flop["phase_transformer"]["update"] > 0
        assert flop["phase_transformer"]["reward"] == 0  # the colour reward calls no transformer
        assert r["spec_peak_tflops"] is None and r["mfu_spec"] is None and "n/a on CPU" in r["spec_peak_device"]
        assert r["ceiling_tflops"] > 0 and 0 < r["mfu_ceiling"] < 1
        syncs = r["host_syncs"]
        assert syncs["counted_on"] == "cpu" and syncs["total"] > 0 and syncs["total"] >= syncs["copies"]
        assert 0 < syncs["per_update"] <= 3  # tests/test_update_syncs.py's bound
        for step, fu in r["first_update"].items():  # fp32: no drift before the first optimizer step
            assert fu["clip_frac"] == 0.0 and 0.0 <= fu["dev_max"] < 1e-5, (mode, step, fu)
        dcp = r["dcp"]
        assert dcp["status"] == "ok" and dcp["resumed_at"] == 2 and dcp["bytes"] > 0
        assert dcp["loss_abs_diff"] == dcp["reward_abs_diff"] == dcp["weights_rel_diff"] == 0.0
        assert all(math.isfinite(x) for x in r["loss"])

    table = (tmp_path / "gpu_check_table.md").read_text()
    assert table.startswith(f"### GPU check, {report['date'][:10]}: cpu")
    assert "| lora | 2 + 4" in table and "| full | 2 + 4" in table and "| tiny_flux | cpu fp32 |" in table
    assert not (tmp_path / "runs").exists()  # models, runs and checkpoints stay out of $OUT (8 files come back)
