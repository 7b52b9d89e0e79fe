"""rewardflow-compare cannot mislead (issue 25, item 3): an unfinished run is named and left out of the budget and
the statistics, no interval of a positive quantity has a negative end, CPU runs are never labelled GPU-h, and a
speedup whose interval is unbounded is "no estimate", not a number."""

from __future__ import annotations

import json
import math

import pytest

from launcher.compare import aggregate, completeness, report, stats
from launcher.compare.cli import main
from test_compare import make_run, write_sweep


def _data(folder):
    return json.loads((folder / "compare" / "comparison.json").read_text())


def test_an_unfinished_run_is_named_and_left_out(tmp_path):
    runs = [make_run("dance_grpo", s, steps=10) for s in range(3)]
    runs += [make_run("fast", s, steps=10, slope=0.02) for s in range(2)]
    still_going = make_run("fast", 2, steps=8, slope=0.02, step_s=0.1)  # 8 of its 10 steps, a fast machine
    still_going.config["trainer"]["steps"] = 10
    folder = write_sweep(tmp_path, [*runs, still_going])
    assert main([str(folder), "--axis", "wallclock_s"]) == 0
    data = _data(folder)
    assert [i["reason"] for i in data["incomplete"]] == ["logged 8 of 10 steps"]
    fast = {g["label"]: g for g in data["groups"]}["fast"]
    assert fast["seeds"] == 2  # left out of the statistics
    assert data["budget"] == pytest.approx(10.0)  # the finished runs' 10 s, not the unfinished run's 0.8 s
    md = (folder / "compare" / "comparison.md").read_text()
    assert "**unfinished**" in md and "logged 8 of 10 steps" in md and "left out of every figure" in md
    # asked for, it is compared (and still named)
    assert main([str(folder), "--axis", "wallclock_s", "--include-unfinished", "--out", str(tmp_path / "all")]) == 0
    every = json.loads((tmp_path / "all" / "comparison.json").read_text())
    assert {g["label"]: g for g in every["groups"]}["fast"]["seeds"] == 3 and every["budget"] == pytest.approx(0.8)
    assert every["incomplete"][0]["reason"] == "logged 8 of 10 steps"


def test_crashed_and_running_wandb_runs_are_incomplete():
    finished, crashed, running = make_run(seed=0), make_run(seed=1), make_run(seed=2)
    finished.state, crashed.state, running.state = "finished", "crashed", "running"
    kept, left = completeness.split([finished, crashed, running], include=False)
    assert kept == [finished] and [i.reason for i in left] == ["W&B state crashed", "W&B state running"]


def test_every_interval_of_a_positive_quantity_stays_above_zero(tmp_path):
    # seeds at very different speeds (the total wall-clock 276.5 [-1095, 1648] had this shape)
    runs = [make_run("dance_grpo", s, steps=10, step_s=t) for s, t in enumerate((0.3, 5.0))]
    runs += [make_run("fast", s, steps=10, slope=0.02, step_s=t) for s, t in enumerate((0.2, 9.0))]
    folder = write_sweep(tmp_path, runs)
    assert main([str(folder), "--axis", "wallclock_s"]) == 0
    for g in _data(folder)["groups"]:
        positive = [*g["total"].values(), *g["per_step"].values(), g["reach"]]
        for e in positive:
            if e is not None and e["lo"] is not None:
                assert e["lo"] > 0, e
        assert g["label"] == "dance_grpo" or g["speedup_interval"][0] > 0


def test_cpu_runs_are_never_labelled_gpu_hours(tmp_path):
    runs = [make_run("dance_grpo", s, steps=10) for s in range(2)]
    runs += [make_run("fast", s, steps=10, slope=0.02) for s in range(2)]
    folder = write_sweep(tmp_path, runs)
    for job in folder.iterdir():  # what the trainer writes (launcher/tracking/placement_file.py)
        (job / "placement.json").write_text(json.dumps({"device": "cpu", "world_size": 1}))
    assert main([str(folder)]) == 0  # the default axis, time/gpu_hours
    md = (folder / "compare" / "comparison.md").read_text()
    data = _data(folder)
    assert data["device"] == "cpu" and data["axis_unit"] == "device-s"
    assert "GPU-h" not in md and "device-seconds (CPU processes x wall-clock)" in md
    assert data["budget"] == pytest.approx(10.0)  # 1 process x 10 s, in device-seconds
    # on GPUs (model.device=cuda said explicitly) the same numbers are GPU-hours
    for run in runs:
        run.config["model"]["device"] = "cuda"
    gpu = write_sweep(tmp_path / "gpu", runs)
    assert main([str(gpu)]) == 0
    assert _data(gpu)["axis_unit"] == "GPU-h" and _data(gpu)["budget"] == pytest.approx(10.0 / 3600)


def test_an_unbounded_speedup_is_reported_as_no_estimate():
    runs = [make_run("dance_grpo", s, steps=20) for s in range(3)]
    runs += [make_run("fast", s, steps=20, slope=0.02) for s in range(3)]
    from launcher.compare import grouping
    from launcher.compare.metric import choose_metric

    groups = grouping.group_runs(runs, ["method.name"])
    c = aggregate.compare(
        groups, grouping.select_baseline(groups, None), aggregate.Settings(axis="wallclock_s"), choose_metric(runs)
    )
    fast = {r.label: r for r in c.groups}["fast"]
    assert "×" in report._speedup(fast, c)
    fast.differences["reach"] = stats.Estimate(5.78, 0.0, math.inf, 2, "log-t", 3.0)  # the headline
    fast.speedup_lo, fast.speedup_hi = 0.0, math.inf
    assert report._speedup(fast, c) == "no estimate (interval unbounded)"
