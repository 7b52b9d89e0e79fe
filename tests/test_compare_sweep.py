"""Issue 9 acceptance: a real 2-method x 2-seed sweep through the CLI, then `python -m launcher.compare` on its
folder; every number of the table, intervals included, is recomputed here from the metrics.jsonl files,
independently of the tool (plain Python on the rows), and the figures must be real PNGs."""

from __future__ import annotations

import json
import math
import re
import statistics
import subprocess
import sys

import numpy as np
import pytest
import yaml

from conftest import ROOT, rewardflow_cmd

pytestmark = pytest.mark.slow
STEPS, SMOOTH = 5, 2


def _cli(*args, cwd=ROOT):
    return subprocess.run([*rewardflow_cmd(), *args], cwd=cwd, capture_output=True, text=True, timeout=600)


def _compare(*args):
    return subprocess.run(
        [sys.executable, "-m", "launcher.compare", *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("cmp")
    proc = _cli(
        "-m",
        "method=dance_grpo,flow_grpo_fast",
        "trainer.seed=0,1",
        "experiment=smoke",
        f"trainer.steps={STEPS}",
        "trainer.threads=1",
        f"output_root={root}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (folder,) = (root / "train" / "multiruns").iterdir()
    return root, folder


def _runs_of(folder):
    """{method: [rows of each seed]} straight from the files the trainer wrote."""
    out = {}
    for job in sorted(p for p in folder.iterdir() if (p / "metrics.jsonl").exists()):
        method = yaml.safe_load((job / ".hydra" / "config.yaml").read_text())["method"]["name"]
        rows = [json.loads(line) for line in (job / "metrics.jsonl").read_text().splitlines()]
        out.setdefault(method, []).append(rows)
    return out


def _smoothed(rows):
    r = [row["reward/mean"] for row in rows]
    return [sum(r[max(0, i - SMOOTH + 1) : i + 1]) / len(r[max(0, i - SMOOTH + 1) : i + 1]) for i in range(len(r))]


def _interp_hold(x, xs, ys):
    if x < xs[0]:
        return math.nan  # the budget ends before this run's first step: no value (a slow first step on a busy machine)
    if x >= xs[-1]:
        return ys[-1]
    for i in range(1, len(xs)):
        if x <= xs[i]:
            return ys[i - 1] + (ys[i] - ys[i - 1]) * (x - xs[i - 1]) / (xs[i] - xs[i - 1])
    raise AssertionError


def _first_reach(xs, ys, target):
    for i, y in enumerate(ys):
        if y >= target - 1e-12:
            return xs[0] if i == 0 else xs[i - 1] + (target - ys[i - 1]) / (y - ys[i - 1]) * (xs[i] - xs[i - 1])
    return None


# two seeds: Student's t with 1 degree of freedom is the Cauchy distribution, whose 0.975 quantile is tan(0.475 pi)
T_975_DF1 = math.tan(0.475 * math.pi)


def _with_interval(values):
    """(mean, low, high) of two seeds' values: the 95% t-interval; one finite value: (it, None, None)."""
    values = [v for v in values if math.isfinite(v)]
    if len(values) < 2:
        return values[0], None, None
    m = statistics.mean(values)
    half = T_975_DF1 * statistics.stdev(values) / math.sqrt(len(values))
    return m, m - half, m + half


def _log_interval(values):
    """(geometric mean, low, high) of two seeds' positive values: the 95% t-interval of the logs, exponentiated."""
    m, lo, hi = _with_interval([math.log(v) for v in values])
    return math.exp(m), math.exp(lo), math.exp(hi)


def _expected(runs):
    """Everything the outcome and cost tables show, recomputed from the rows (axis: time/gpu_hours, which on this
    CPU sweep is shown in device-seconds: ranks x wall-clock s)."""

    def gpu(rows):
        return [row["time/gpu_hours"] * 3600 for row in rows]

    budget = min(gpu(rows)[-1] for seeds in runs.values() for rows in seeds)
    exp = {}
    for method, seeds in runs.items():
        finals = [_smoothed(rows)[-1] for rows in seeds]
        at_budget = [_interp_hold(budget, gpu(rows), _smoothed(rows)) for rows in seeds]
        exp[method] = {
            "finals": finals,
            "final": _with_interval(finals),
            "at_budget": _with_interval(at_budget),
            # times are positive: the mean over seeds is the geometric mean (their interval is on the log scale)
            "s_per_step": statistics.geometric_mean(
                statistics.mean(r["time/step_s"] for r in rows[1:]) for rows in seeds
            ),
            "phases": [
                statistics.geometric_mean(statistics.mean(r[k] for r in rows[1:]) for rows in seeds)
                for k in ("time/rollout_s", "time/reward_s", "time/update_s")
            ],
            "fwd": statistics.geometric_mean(
                statistics.mean(r["count/transformer_fwd"] for r in rows) for rows in seeds
            ),
            "bwd": statistics.geometric_mean(
                statistics.mean(r["count/transformer_bwd"] for r in rows) for rows in seeds
            ),
            "total": _log_interval([gpu(rows)[-1] for rows in seeds])[0],
        }
    # the target is the lowest final value among the baseline's seeds; each seed's GPU-hours to reach it is the
    # first crossing of its smoothed curve, linear between steps, and the group's is their mean when all got there
    target = min(exp["dance_grpo"]["finals"])
    for method, seeds in runs.items():
        reach = [_first_reach(gpu(rows), _smoothed(rows), target) for rows in seeds]
        if None in reach:
            exp[method]["reach"] = None
        else:  # compute is positive: its interval is on the log scale
            exp[method]["reach"] = _log_interval(reach)
            exp[method]["reach_values"] = reach
    return exp, budget, target


def _table_rows(md, heading):
    section = md.split(f"## {heading}")[1].split("\n## ")[0]
    lines = [l for l in section.strip().splitlines() if l.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    return header, {cells[0]: cells for cells in ([c.strip() for c in l.strip("|").split("|")] for l in lines[2:])}


def _cauchy_cdf(t):
    """Student's t with 1 degree of freedom (two seeds' paired differences)."""
    return 0.5 + math.atan(t) / math.pi


def _nums(cell):
    return [float(x) for x in re.findall(r"-?\d+\.?\d*(?:e-?\d+)?", cell)]


def test_compare_a_real_sweep_matches_the_metrics_files(sweep):
    _, folder = sweep
    out = folder / "compare"
    proc = _compare(str(folder), "--baseline", "dance_grpo", "--smooth", str(SMOOTH))
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = _runs_of(folder)
    assert {m: len(s) for m, s in runs.items()} == {"dance_grpo": 2, "flow_grpo_fast": 2}
    exp, budget, target = _expected(runs)

    data = json.loads((out / "comparison.json").read_text())
    assert data["metric"]["key"] == "reward/mean" and not data["metric"]["held_out"]  # smoke: no evaluation
    assert data["budget"] == pytest.approx(budget) and data["target"] == pytest.approx(target)
    groups = {g["label"]: g for g in data["groups"]}
    trio = lambda e: (e["mean"], e["lo"], e["hi"])  # noqa: E731
    for method, e in exp.items():
        g = groups[method]
        assert g["seeds"] == 2 and g["steps"] == [STEPS, STEPS]
        assert trio(g["final"]) == pytest.approx(e["final"])
        assert trio(g["at_budget"]) == pytest.approx(e["at_budget"])
        assert g["per_step"]["time/step_s"]["mean"] == pytest.approx(e["s_per_step"])
        assert g["per_step"]["count/transformer_fwd"]["mean"] == pytest.approx(e["fwd"])
        assert g["total"]["gpu_hours"]["mean"] == pytest.approx(e["total"])
        if e["reach"] is None:
            assert g["reach"] is None
        else:
            assert trio(g["reach"]) == pytest.approx(e["reach"], rel=1e-9)
    fast = exp["flow_grpo_fast"]["reach"]
    if fast is None:
        assert groups["flow_grpo_fast"]["speedup"] is None
    else:
        # paired by seed: the per-seed ratios' geometric mean and log-scale interval
        ratios = [b / f for b, f in zip(exp["dance_grpo"]["reach_values"], exp["flow_grpo_fast"]["reach_values"])]
        assert groups["flow_grpo_fast"]["speedup"] == pytest.approx(_log_interval(ratios)[0], rel=1e-9)
        assert groups["flow_grpo_fast"]["speedup_interval"] == pytest.approx(list(_log_interval(ratios)[1:]))
    # 2 seeds, 5 steps: the report says how thin that is
    kinds = [w["kind"] for w in data["warnings"]]
    assert kinds[:1] == ["training_reward"] and "few_points" not in kinds and "few_seeds" not in kinds

    # the Markdown table shows the same numbers (rounded as printed)
    md = (out / "comparison.md").read_text()
    header, rows = _table_rows(md, "Outcome at equal compute")
    assert header[3] == f"final reward/mean (last {SMOOTH} steps), 95% interval"
    assert header[4] == f"reward/mean at {budget:.4g} device-s"  # CPU runs: never GPU-h
    assert header[5] == f"device-s to reach {target:.4f}" and header[6] == "speedup vs dance_grpo"
    for method, e in exp.items():
        row = rows[method]
        assert row[1] == "2" and row[2] == str(STEPS)
        assert _nums(row[3]) == pytest.approx(e["final"], abs=6e-5)
        at_budget = e["at_budget"] if e["at_budget"][1] is not None else (e["at_budget"][0], 1)  # "x (1 seed)"
        assert _nums(row[4]) == pytest.approx(at_budget, abs=6e-5)
        if method != "dance_grpo":  # one method against the baseline: Holm leaves the paired t test's p as it is
            diffs = [a - b for a, b in zip(e["finals"], exp["dance_grpo"]["finals"])]
            p = 2 * (1 - _cauchy_cdf(abs(statistics.mean(diffs)) / (statistics.stdev(diffs) / math.sqrt(2))))
            assert row[3].endswith("not significant" if p >= 0.05 else "significant")
        if e["reach"] is None:
            assert row[5].startswith("not reached")
        else:
            assert _nums(row[5]) == pytest.approx(e["reach"], rel=1e-3)
    assert rows["dance_grpo"][6] == "1.00× (baseline)"
    header, rows = _table_rows(md, "Cost per step")
    for method, e in exp.items():
        row = rows[method]
        assert _nums(row[1])[0] == pytest.approx(e["s_per_step"], rel=1e-3)
        assert [_nums(c)[0] for c in row[2:5]] == pytest.approx(e["phases"], rel=1e-3, abs=1e-9)
        assert (_nums(row[5])[0], _nums(row[6])[0]) == pytest.approx((e["fwd"], e["bwd"]))
    assert exp["dance_grpo"]["bwd"] > exp["flow_grpo_fast"]["bwd"]  # DanceGRPO trains more transitions

    from PIL import Image

    for png in (
        "reward_vs_step.png",
        "reward_vs_wallclock_s.png",
        "reward_vs_gpu_hours.png",
        "reward_curves.png",
        "time_per_step.png",
    ):
        path = out / png
        assert path.stat().st_size > 10_000, png
        pixels = np.asarray(Image.open(path).convert("L"), dtype=float)
        assert pixels.std() > 10 and (pixels < 128).mean() > 0.005, png  # drawn on, not blank

    # the offline W&B files give the same comparison as metrics.jsonl
    proc = _compare(str(folder), "--source", "wandb", "--smooth", str(SMOOTH), "--out", str(folder / "cmp_wandb"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    via_wandb = json.loads((folder / "cmp_wandb" / "comparison.json").read_text())
    for g in via_wandb["groups"]:
        assert trio(g["final"]) == pytest.approx(trio(groups[g["label"]]["final"]))
        assert g["speedup"] == pytest.approx(groups[g["label"]]["speedup"])
        assert {r["group"] for r in g["runs"]} == {f"sweep-{folder.name}"}


def test_compare_refuses_a_sweep_mixed_with_another_reward(sweep):
    root, folder = sweep
    proc = _cli("experiment=smoke", "reward=jpeg", "logger=none", "trainer.threads=1", f"output_root={root}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (single,) = (root / "train" / "runs").iterdir()
    proc = _compare(str(folder), str(single), "--out", str(root / "mixed"))
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "reward.name = color (4 runs), jpeg (1 run)" in proc.stderr, proc.stderr
    assert "--where reward.name=color" in proc.stderr and "--allow-mixed reward.name" in proc.stderr
    # following the message's first fix works
    proc = _compare(str(folder), str(single), "--where", "reward.name=color", "--out", str(root / "fixed"))
    assert proc.returncode == 0, proc.stderr[-3000:]
