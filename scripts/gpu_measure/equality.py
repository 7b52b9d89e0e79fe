"""Section ``equality`` (issue 27, item 7a): the tiny twins train the same steps from the same seed on the CPU in
fp32 (the reference) and on the device, through the real trainer; the rewards, losses and final weights agree
within the tolerance of the device run's dtype.

Why it can hold: the sampling noise is drawn on the host from a per-step seed (launcher/train/trainer.py
``step_seed``, models/backbone.py ``host_randn``) and the reward is deterministic, so the two runs differ only by
the device's arithmetic. fp32 on CUDA differs by kernel order and the convolutions' TF32 (1e-3); bf16 by its 8-bit
mantissa (2^-8 = 4e-3 per rounding, compounding over 3 optimizer steps: 5e-2). The CPU rehearsal compares the CPU
with itself: exactly equal, which proves the comparison itself (a nondeterministic trainer would fail it).
"""

from __future__ import annotations

import math

from gpu_measure.profile import Check
from gpu_measure.record import Recorder
from gpu_measure.trainer_runs import build_trainer, close, compose_cfg, digest

#: largest difference accepted, by the device run's dtype: rewards (absolute, in [0, 1]) and weights (relative, of
#: each parameter's sum of squares)
TOLERANCES = {"exact": 0.0, "fp32": 1e-3, "bf16": 5e-2}


def train_twin(chk: Check, twin: str, device: str, dtype: str, steps: int) -> dict:
    """``steps`` steps of the twin's smoke run on ``device`` in ``dtype``: per-step reward/mean and loss, the final
    weights' digest."""
    cfg = compose_cfg(
        [
            f"model={twin}",
            "experiment=smoke",
            "logger=none",
            f"model.device={device}",
            f"model.dtype={dtype}",
            f"trainer.steps={steps}",
            "trainer.seed=0",
            "trainer.memory_check=off",
        ]
    )
    runs = chk.work_dir / "runs"
    n = len(list(runs.glob("equality-*"))) if runs.is_dir() else 0  # a fresh run dir per run (the same pair twice)
    trainer = build_trainer(cfg, runs / f"equality-{n}-{twin}-{device}-{dtype}")
    rows = [trainer.train_step(step) for step in range(steps)]
    out = {
        "reward": [float(r["reward/mean"]) for r in rows],
        "loss": [float(r.get("loss", math.nan)) for r in rows],
        "digest": digest(trainer),
    }
    close(trainer)
    return out


def compare(ref: dict, run: dict) -> dict:
    """Largest differences of a run from the reference."""
    reward = max(abs(a - b) for a, b in zip(run["reward"], ref["reward"]))
    loss = max(abs(a - b) for a, b in zip(run["loss"], ref["loss"]))
    sq_ref, sq_run = ref["digest"][:, 1], run["digest"][:, 1]
    weights = float(((sq_run - sq_ref).abs() / sq_ref.abs().clamp_min(1e-30)).max())
    return {"reward_abs_diff": reward, "loss_abs_diff": loss, "weights_rel_diff": weights}


def section_equality(chk: Check, rec: Recorder, allowance: float) -> None:
    steps = 3
    rows = chk.report.setdefault("equality", [])  # filled as each pair is compared: a timeout keeps what ran
    print("== (a) equality: the tiny twins, 3 steps from one seed, device vs CPU fp32 ==", flush=True)
    for twin in chk.profile.equality_twins:
        ref = train_twin(chk, twin, "cpu", "fp32", steps)
        for device, dtype, tol_name in chk.profile.equality_runs:
            diffs = compare(ref, train_twin(chk, twin, device, dtype, steps))
            tol = TOLERANCES[tol_name]
            within = diffs["reward_abs_diff"] <= tol and diffs["weights_rel_diff"] <= tol
            row = {
                "twin": twin,
                "device": device,
                "dtype": dtype,
                "steps": steps,
                "tolerance": tol,
                "tolerance_kind": tol_name,
                "within_tolerance": within,
                **diffs,
                "reward_ref": ref["reward"],
            }
            rows.append(row)
            verdict = "equal" if within else "DIFFERS"
            rec.write(
                "equality",
                f"{twin} {device} {dtype} vs cpu fp32",
                **row,
                value=f"{verdict}: reward {diffs['reward_abs_diff']:.2g}, weights {diffs['weights_rel_diff']:.2g} "
                f"(tol {tol:g})",
            )
