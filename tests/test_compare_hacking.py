"""Reward hacking in plain sight (issue 28, item 5): rewardflow-compare sets each group's training reward against
every held-out score and warns when the training reward rises while a held-out score falls beyond its interval."""

from __future__ import annotations

import json

import numpy as np
import pytest

from launcher.compare import hacking
from launcher.compare.cli import main
from test_compare import make_run, write_sweep


def _hacking_run(method, seed, fall=-0.002):
    """Training reward up 0.01 a step; eval/pickscore/mean (another reward, held out) down ``fall`` a step; a
    seed-dependent wobble so the seeds' changes differ (an interval of width > 0)."""
    run = make_run(method, seed, steps=20, slope=0.01 + 0.001 * seed, eval_every=5)
    for row in run.rows:
        if "eval/pickscore/mean" in row:
            row["eval/pickscore/mean"] = 0.2 + (fall + 0.0003 * seed) * row["step"]
    return run


def _data(folder):
    return json.loads((folder / "compare" / "comparison.json").read_text())


def test_training_reward_up_while_a_held_out_reward_falls_is_a_warning(tmp_path, capsys):
    runs = [make_run("dance_grpo", s, steps=20, eval_every=5) for s in range(3)]  # every score rises
    runs += [_hacking_run("fast", s) for s in range(3)]
    folder = write_sweep(tmp_path, runs)
    assert main([str(folder)]) == 0
    data = _data(folder)
    flagged = [w for w in data["warnings"] if w["kind"] == "reward_hacking"]
    assert len(flagged) == 1 and flagged[0]["message"].startswith("fast: the training reward rose")
    assert "eval/pickscore/mean" in flagged[0]["message"] and "eval/color/mean" not in flagged[0]["message"]
    rows = {r["group"]: r for r in data["hacking"]}
    fast = rows["fast"]["held_out"]["eval/pickscore/mean"]
    assert fast["hi"] < 0 and rows["fast"]["train"]["lo"] > 0
    # the seeds' changes: pickscore fell (-0.002 + 0.0003 s) x 19 steps; mean over seeds 0, 1, 2
    assert fast["mean"] == pytest.approx(np.mean([(-0.002 + 0.0003 * s) * 19 for s in range(3)]))
    assert rows["dance_grpo"]["held_out"]["eval/pickscore/mean"]["lo"] > 0
    md = (folder / "compare" / "comparison.md").read_text()
    assert "## Training reward against held-out scores" in md and "**reward_hacking**" in md
    table = md.split("## Training reward against held-out scores")[1].split("##")[0]
    assert "| fast |" in table and table.count("| yes |") == 1 and table.count("| no |") == 1
    out = capsys.readouterr().out
    assert "warning (reward_hacking)" in out and "training reward against held-out scores" in out


def test_one_seed_is_named_as_not_tested(tmp_path):
    folder = write_sweep(tmp_path, [make_run("dance_grpo", 0, eval_every=5), _hacking_run("fast", 0)])
    assert main([str(folder), "--baseline", "dance_grpo"]) == 0
    flagged = [w["message"] for w in _data(folder)["warnings"] if w["kind"] == "reward_hacking"]
    assert len(flagged) == 1 and flagged[0].startswith("fast (1 seed, not tested: no interval)")
    assert "| untested (1 seed) |" in (folder / "compare" / "comparison.md").read_text()


def test_a_fall_within_the_seeds_noise_is_not_flagged(tmp_path):
    # seed 0's pickscore falls, seed 1's rises as much: the interval of the mean change straddles 0
    runs = [make_run("dance_grpo", s, steps=20, eval_every=5) for s in range(2)]
    runs += [_hacking_run("fast", 0, fall=-0.002), _hacking_run("fast", 1, fall=0.0017)]
    folder = write_sweep(tmp_path, runs)
    assert main([str(folder)]) == 0
    data = _data(folder)
    assert not [w for w in data["warnings"] if w["kind"] == "reward_hacking"]
    e = {r["group"]: r for r in data["hacking"]}["fast"]["held_out"]["eval/pickscore/mean"]
    assert e["lo"] < 0 < e["hi"]


def test_without_held_out_scores_there_is_no_table(tmp_path):
    folder = write_sweep(tmp_path, [make_run("dance_grpo", s) for s in range(2)])
    assert main([str(folder)]) == 0
    assert _data(folder)["hacking"] == []
    assert "Training reward against held-out scores" not in (folder / "compare" / "comparison.md").read_text()


def test_changes_are_last_window_minus_first_window():
    run = make_run("dance_grpo", 0, steps=30, slope=0.01, eval_every=10)
    # training: mean of steps 20-29 minus mean of steps 0-9 = 0.01 x 20
    assert hacking.train_change(run) == pytest.approx(0.2)
    assert hacking.train_change(run, window=1) == pytest.approx(0.29)
    # held out: the last evaluation (step 29) minus the first (step 0)
    assert hacking.held_out_change(run, "eval/color/mean") == pytest.approx(0.005 * 29)
    short = make_run("dance_grpo", 0, steps=1, eval_every=1)
    assert np.isnan(hacking.train_change(short)) and np.isnan(hacking.held_out_change(short, "eval/color/mean"))
