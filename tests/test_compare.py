"""rewardflow-compare on synthetic runs (seconds): the aggregation math against closed forms, the refusals of empty
and mixed groups, the held-out metric and the thin-evidence warnings on fabricated run folders, the W&B online path
through a fake ``wandb.Api``, and the W&B summary run (offline). The interval statistics: test_compare_stats.py."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from launcher.compare import aggregate, grouping, stats
from launcher.compare.cli import main
from launcher.compare.errors import CompareError
from launcher.compare.metric import choose_metric
from launcher.compare.runs import RunData, clean_rows


def make_run(
    method="dance_grpo",
    seed=0,
    steps=20,
    slope=0.01,
    base=0.5,
    step_s=1.0,
    gpus=1,
    model="tiny_flux",
    reward="color",
    extra=None,
    name=None,
    group="sweep-x",
    fwd=36,
    bwd=12,
    eval_every=0,
    eval_base=0.6,
    eval_slope=0.005,
):
    """A run whose reward/mean = base + slope * step and whose steps take ``step_s`` seconds each (a number, or one
    per run step). With ``eval_every`` it also has held-out evaluations at steps 0, eval_every, ... and the last:
    eval/color/mean = eval_base + eval_slope * step, eval/pickscore/mean (another reward), time/eval_s and the
    evaluation's own compute axes."""
    times = [step_s] * steps if isinstance(step_s, (int, float)) else list(step_s)
    rows, wall = [], 0.0
    for i in range(steps):
        wall += times[i]
        rows.append(
            {
                "step": i,
                "reward/mean": base + slope * i,
                "time/step_s": times[i],
                "time/rollout_s": 0.5 * times[i],
                "time/reward_s": 0.1 * times[i],
                "time/update_s": 0.4 * times[i],
                "time/wallclock_s": wall,
                "time/gpu_hours": gpus * wall / 3600,
                "count/transformer_fwd": fwd,
                "count/transformer_bwd": bwd,
            }
        )
        if eval_every and (i % eval_every == 0 or i == steps - 1):
            rows[-1].update(
                {
                    f"eval/{reward}/mean": eval_base + eval_slope * i,
                    f"eval/{reward}/std": 0.05,
                    "eval/pickscore/mean": 0.2 + 0.001 * i,
                    "eval/pickscore/std": 0.01,
                    "time/eval_s": 7.0,
                    # the model after i steps: the compute before step i (docs/evaluation.md#what-a-run-logs)
                    "time/eval_wallclock_s": wall - times[i],
                    "time/eval_gpu_hours": gpus * (wall - times[i]) / 3600,
                }
            )
    config = {
        "method": {"name": method, "eta": 0.3},
        "model": {"name": model},
        "reward": {"name": reward},
        "data": {"name": "demo"},
        "trainer": {"seed": seed, "steps": steps},
        "optimizer": {"lr": 3e-3},
    }
    if eval_every:
        config["eval"] = {"every": eval_every, "split": 4, "samples_per_prompt": 2, "sampling_steps": 10}
    for key, value in (extra or {}).items():
        node = config
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    name = name or f"{method}-s{seed}"
    return RunData(run_id=name, name=name, source=f"/runs/{name}", config=config, rows=clean_rows(rows), group=group)


def write_sweep(root, runs):
    """Fabricated run folders as ``rewardflow -m`` leaves them (metrics.jsonl, .hydra/config.yaml, overrides.yaml);
    a step's evaluation is its own row after the training row, with the step and compute axes."""
    import yaml

    folder = root / "train" / "multiruns" / "2026-12-01_10-00-00"
    for i, run in enumerate(runs):
        job = folder / str(i)
        (job / ".hydra").mkdir(parents=True)
        lines = []
        for row in run.rows:
            axes = {"step": row["step"]}  # an evaluation's compute is on its eval/* keys
            held_out = {k: v for k, v in row.items() if k.startswith("eval/") or k == "time/eval_s"}
            lines.append({k: v for k, v in row.items() if k not in held_out})
            if held_out:
                lines.append({**axes, **held_out})
        (job / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
        (job / ".hydra" / "config.yaml").write_text(yaml.safe_dump(run.config))
        overrides = [f"method={run.get('method.name')}", f"trainer.seed={run.seed}"]
        (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    return folder


# -- aggregation math ---------------------------------------------------------------------------------------------
def test_trailing_mean_and_spread_bands():
    y = np.array([1.0, 2.0, 3.0, 4.0])
    assert aggregate.trailing_mean(y, 2).tolist() == [1.0, 1.5, 2.5, 3.5]
    assert aggregate.trailing_mean(y, 10).tolist() == [1.0, 1.5, 2.0, 2.5]
    ys = np.array([[1.0, 0.0], [3.0, 0.0], [2.5, 3.0]])  # 3 seeds x 2 points
    lo, hi = aggregate.spread_band(ys[:2], "std")
    assert lo.tolist() == pytest.approx([2 - math.sqrt(2), 0.0]) and hi.tolist() == pytest.approx([2 + math.sqrt(2), 0])
    lo, hi = aggregate.spread_band(ys[:2], "sem")
    assert hi.tolist() == pytest.approx([3.0, 0.0])
    lo, hi = aggregate.spread_band(ys, "minmax")
    assert lo.tolist() == [1.0, 0.0] and hi.tolist() == [3.0, 3.0]


def test_seed_curve_interpolates_on_the_union_and_holds_finished_seeds():
    a = make_run(seed=0, steps=3, step_s=1.0)  # x = 1, 2, 3 s
    b = make_run(seed=1, steps=4, step_s=0.75)  # x = 0.75, 1.5, 2.25, 3 s
    traces = [aggregate.make_trace(r, 1) for r in (a, b)]
    curve = aggregate.seed_curve(traces, "wallclock_s", "std")
    assert curve.x.tolist() == [1.0, 1.5, 2.0, 2.25, 3.0]  # from the latest first point on
    ya = np.interp(curve.x, [1, 2, 3], [0.5, 0.51, 0.52])
    yb = np.interp(curve.x, [0.75, 1.5, 2.25, 3.0], [0.5, 0.51, 0.52, 0.53])
    assert curve.mean == pytest.approx((ya + yb) / 2)
    assert curve.hi - curve.mean == pytest.approx(np.abs(ya - yb) / math.sqrt(2))
    short = make_run(seed=2, steps=2, step_s=1.0)  # ends at 2 s and then holds 0.51
    held = aggregate.seed_curve([traces[0], aggregate.make_trace(short, 1)], "wallclock_s", "std")
    assert held.mean[-1] == pytest.approx((0.52 + 0.51) / 2)


def test_seeds_with_the_same_steps_are_averaged_step_by_step():
    a = make_run(seed=0, steps=4, step_s=1.0, base=0.5)  # x = 1, 2, 3, 4 s
    b = make_run(seed=1, steps=4, step_s=2.0, base=0.6)  # x = 2, 4, 6, 8 s
    traces = [aggregate.make_trace(r, 1) for r in (a, b)]
    curve = aggregate.seed_curve(traces, "wallclock_s", "minmax")
    assert curve.x.tolist() == [1.5, 3.0, 4.5, 6.0]
    assert curve.mean == pytest.approx([0.55, 0.56, 0.57, 0.58])
    assert curve.lo == pytest.approx([0.5, 0.51, 0.52, 0.53]) and curve.hi == pytest.approx([0.6, 0.61, 0.62, 0.63])
    # the group reaches its own final reward at its mean total compute, not at its longest seed's end
    assert aggregate.first_reach(curve.x, curve.mean, 0.58) == pytest.approx(6.0)
    assert aggregate.first_reach(curve.x, curve.mean, 0.565) == pytest.approx(3.75)
    assert aggregate.first_reach(curve.x, curve.mean, 0.7) is None


def _compare(runs, baseline=None, **settings):
    groups = grouping.group_runs(runs, ["method.name"])
    return aggregate.compare(
        groups, grouping.select_baseline(groups, baseline), aggregate.Settings(**settings), choose_metric(runs)
    )


def test_budget_reach_and_speedup_match_closed_forms():
    # reward = 0.5 + 0.01 * step. Baseline: 1 s/step, 20 steps -> final 0.69 reached at step 19 = 20 s.
    # Fast: 0.5 s/step, 30 steps, same per-step gain -> reaches 0.69 at step 19 = 10 s: 2x faster in wall-clock.
    # Slow: a quarter of the gain per step, 20 steps -> never reaches 0.69 (best 0.5475).
    runs = [make_run("dance_grpo", s, steps=20, step_s=1.0) for s in (0, 1)]
    runs += [make_run("fast", s, steps=30, step_s=0.5) for s in (0, 1)]
    runs += [make_run("slow", s, steps=20, step_s=1.0, slope=0.0025) for s in (0, 1)]
    c = _compare(runs, axis="wallclock_s", smooth=1)
    g = {r.label: r for r in c.groups}
    assert c.baseline == "dance_grpo" and c.target == pytest.approx(0.69)
    assert c.budget == pytest.approx(15.0)  # the fast runs' 30 x 0.5 s
    assert g["dance_grpo"].reach.mean == pytest.approx(20.0) and g["fast"].reach.mean == pytest.approx(10.0)
    assert g["fast"].speedup == pytest.approx(2.0)
    assert g["slow"].reach is None and g["slow"].reached == 0 and g["slow"].speedup is None
    assert g["slow"].best == pytest.approx(0.5475)
    # at 15 s: baseline at step 14 (0.64), fast at its end (step 29: 0.79), slow at step 14 (0.535)
    assert g["dance_grpo"].at_budget.mean == pytest.approx(0.64)
    assert g["fast"].at_budget.mean == pytest.approx(0.79)
    assert g["slow"].at_budget.mean == pytest.approx(0.535)
    # the step axis counts steps done: the baseline needs 20, fast 20 too -> 1x
    c = _compare(runs, axis="step", smooth=1)
    g = {r.label: r for r in c.groups}
    assert g["dance_grpo"].reach.mean == pytest.approx(20.0) and g["fast"].speedup == pytest.approx(1.0)
    assert c.budget == pytest.approx(20.0)
    # twice the GPUs double GPU-hours: the fast method (on 4 GPUs) loses its edge on the gpu_hours axis
    runs[2:4] = [make_run("fast", s, steps=30, step_s=0.5, gpus=4) for s in (0, 1)]
    c = _compare(runs, "dance_grpo", smooth=1)
    assert {r.label: r for r in c.groups}["fast"].speedup == pytest.approx(0.5)


def test_target_reach_per_seed_and_the_tests_against_the_baseline():
    # Three seeds per group, each seed a line with its own offset: reward = base + 0.01 * step, 1 s per step.
    # Baseline finals 0.69, 0.70, 0.71 -> target 0.69, the lowest; baseline seeds reach it at 20, 19, 18 s.
    # "fast" gains twice as much per step from the same start: reaches 0.69 at (0.19 - offset) / 0.02 + 1 s.
    offsets = (0.0, 0.01, 0.02)
    runs = [make_run("dance_grpo", s, steps=20, base=0.5 + o) for s, o in enumerate(offsets)]
    runs += [make_run("fast", s, steps=20, base=0.5 + o, slope=0.02) for s, o in enumerate(offsets)]
    runs += [make_run("same", s, steps=20, base=0.5 + o + 0.001) for s, o in enumerate(offsets)]
    c = _compare(runs, axis="wallclock_s", smooth=1)
    g = {r.label: r for r in c.groups}
    assert c.target == pytest.approx(0.69)
    base_reach = [(0.19 - o) / 0.01 + 1 for o in offsets]
    fast_reach = [(0.19 - o) / 0.02 + 1 for o in offsets]
    assert g["dance_grpo"].reach.values == pytest.approx(base_reach)
    assert g["fast"].reach.values == pytest.approx(fast_reach)
    # compute is positive: the t interval of the logs (3 seeds: t_{0.975, 2} = 4.3027), around the geometric mean
    for r, values in ((g["dance_grpo"], base_reach), (g["fast"], fast_reach)):
        logs = np.log(values)
        half = stats.t_quantile(0.975, 2) * np.std(logs, ddof=1) / math.sqrt(3)
        assert (r.reach.mean, r.reach.lo, r.reach.hi) == pytest.approx(
            (math.exp(logs.mean()), math.exp(logs.mean() - half), math.exp(logs.mean() + half))
        )
    # the speedup is paired by seed: the geometric mean of the per-seed ratios, its interval that of the log-ratios
    ratios = np.log(np.array(base_reach) / np.array(fast_reach))
    half = stats.t_quantile(0.975, 2) * np.std(ratios, ddof=1) / math.sqrt(3)
    assert (g["fast"].speedup, g["fast"].speedup_lo, g["fast"].speedup_hi) == pytest.approx(
        (math.exp(ratios.mean()), math.exp(ratios.mean() - half), math.exp(ratios.mean() + half))
    )
    # fast: final rewards 0.88-0.90 against 0.69-0.71: significant. "same" is 0.001 higher on every seed: the
    # seeds spread 0.01 and the unpaired intervals overlap, but the paired test sees the shift on every seed
    assert g["fast"].verdicts["final"] == stats.SIGNIFICANT
    assert g["same"].verdicts["final"] == stats.SIGNIFICANT
    assert g["same"].differences["final"].mean == pytest.approx(0.001)
    assert g["fast"].verdicts["reach"] == stats.SIGNIFICANT and g["fast"].speedup_lo > 1
    # an explicit target
    c = _compare(runs, axis="wallclock_s", smooth=1, target=0.6)
    assert {r.label: r for r in c.groups}["dance_grpo"].reach.values == pytest.approx([11.0, 10.0, 9.0])


def test_compute_to_reach_is_never_negative():
    # fast's seeds reach 0.69 at 1, 1 and 20 s: the plain t interval of the mean (7.33 +- 4.30 * 10.97 / sqrt 3)
    # reaches below 0 s; on the log scale it stays above 0, and the speedup has a finite interval
    runs = [make_run("dance_grpo", s, steps=20) for s in range(3)]
    runs += [make_run("fast", s, steps=20, base=b) for s, b in enumerate((0.7, 0.7, 0.5))]
    c = _compare(runs, axis="wallclock_s", smooth=1)
    fast = {r.label: r for r in c.groups}["fast"]
    assert fast.reach.values == pytest.approx([1.0, 1.0, 20.0])
    assert fast.reach.mean - stats.t_quantile(0.975, 2) * np.std([1, 1, 20], ddof=1) / math.sqrt(3) < 0
    assert 0 < fast.reach.lo < fast.reach.mean < fast.reach.hi < math.inf
    assert 0 < fast.speedup_lo < 1 < fast.speedup_hi < math.inf and fast.verdicts["reach"] == "not significant"


def test_per_step_costs_leave_out_warmup():
    run = make_run(steps=4, step_s=1.0)
    run.rows[0]["time/step_s"] = 9.0  # a slow first step (lazy init)
    costs = aggregate.per_step_costs([run], warmup=1, confidence=0.95)
    assert costs["time/step_s"].mean == pytest.approx(1.0)
    assert aggregate.per_step_costs([run], 0, 0.95)["time/step_s"].mean == pytest.approx(3.0)
    assert costs["count/transformer_fwd"].mean == 36 and costs["count/transformer_bwd"].mean == 12


def test_nan_reward_steps_are_left_out_and_rows_deduplicated():
    run = make_run(steps=5)
    run.rows[2]["reward/mean"] = None
    trace = aggregate.make_trace(run, 1)
    assert trace.x["step"].tolist() == [0, 1, 3, 4]
    rows = clean_rows(
        [
            {"step": 0, "reward/mean": 1.0},
            {"step": 1, "reward/mean": 2.0},
            {"step": 1, "reward/mean": 3.0, "samples": {"_type": "image-file"}},
        ]
    )
    assert rows == [{"step": 0, "reward/mean": 1.0}, {"step": 1, "reward/mean": 3.0}]


# -- grouping and refusals ----------------------------------------------------------------------------------------
def test_grouping_by_an_extra_key_and_baseline_selection():
    runs = [
        make_run("flow_grpo_fast", s, extra={"method.window_size": w}, name=f"w{w}s{s}") for w in (2, 4) for s in (0, 1)
    ] + [make_run("dance_grpo", s) for s in (0, 1)]
    with pytest.raises(CompareError, match=r"method.window_size = 2 \(2 runs\), 4 \(2 runs\)"):
        grouping.group_runs(runs, ["method.name"])
    groups = grouping.group_runs(runs, ["method.name", "method.window_size"])
    assert [g.label for g in groups] == [
        "dance_grpo · window_size=(absent)",
        "flow_grpo_fast · window_size=2",
        "flow_grpo_fast · window_size=4",
    ]
    assert grouping.select_baseline(groups, "dance_grpo").label.startswith("dance_grpo")
    with pytest.raises(CompareError, match="matches several groups"):
        grouping.select_baseline(groups, "flow_grpo_fast")
    with pytest.raises(CompareError, match="not among the groups"):
        grouping.select_baseline(groups, "jagg")
    assert len(grouping.group_runs(runs, ["method.name"], ["method.window_size"])) == 2


def test_mixed_models_or_rewards_are_refused_with_the_keys_and_the_fixes():
    runs = [make_run("dance_grpo", s) for s in (0, 1)] + [make_run("flow_grpo", s, reward="jpeg") for s in (0, 1)]
    with pytest.raises(CompareError) as e:
        grouping.group_runs(runs, ["method.name"])
    msg = str(e.value)
    assert "reward.name = color (2 runs), jpeg (2 runs)" in msg
    for fix in ("--where reward.name=", "--by method.name,reward.name", "--allow-mixed reward.name"):
        assert fix in msg, msg
    assert len(grouping.group_runs(runs, ["method.name", "reward.name"])) == 2
    kept = grouping.apply_where(runs, grouping.parse_where(["reward.name=jpeg"]))
    assert {r.get("method.name") for r in kept} == {"flow_grpo"}
    with pytest.raises(CompareError, match="leaves no runs"):
        grouping.apply_where(runs, grouping.parse_where(["model.name=flux"]))


def test_seeds_of_one_group_may_differ_only_in_ignored_keys():
    runs = [make_run(seed=s, extra={"logger.run_name": f"r{s}", "trainer.progress": s == 0}) for s in (0, 1)]
    assert len(grouping.group_runs(runs, ["method.name"])) == 1
    runs.append(make_run(seed=2, extra={"optimizer.lr": 1e-3}))
    with pytest.raises(CompareError, match=r"optimizer.lr = 0.003 \(2 runs\), 0.001 \(1 run\)"):
        grouping.group_runs(runs, ["method.name"])


def test_cli_errors_are_messages_not_tracebacks(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no runs found" in err and "Traceback" not in err
    assert main([]) == 2
    assert "nothing to compare" in capsys.readouterr().err
    assert main([str(tmp_path / "missing")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main([str(tmp_path), "--wandb-report"]) == 2
    assert "--project" in capsys.readouterr().err


# -- the held-out metric, on fabricated run folders ------------------------------------------------------------------
def _held_out_runs(**kw):
    """Two methods x 3 seeds, 21 steps, evaluated every 5 steps (steps 0, 5, 10, 15, 20). On the training reward
    "fast" looks far better (twice the slope); on the held-out ruler it is barely different."""
    runs = [make_run("dance_grpo", s, steps=21, eval_every=5, eval_base=0.6 + 0.01 * s, **kw) for s in range(3)]
    runs += [
        make_run("fast", s, steps=21, slope=0.02, eval_every=5, eval_base=0.601 + 0.01 * s, **kw) for s in range(3)
    ]
    return runs


def test_held_out_metric_is_compared_when_the_runs_have_it(tmp_path, capsys):
    runs = _held_out_runs()
    folder = write_sweep(tmp_path, runs)
    assert main([str(folder), "--axis", "step"]) == 0
    out = capsys.readouterr().out
    data = json.loads((folder / "compare" / "comparison.json").read_text())
    # the trained reward's evaluation, not eval/pickscore/mean (another reward) nor the training reward
    assert data["metric"]["key"] == "eval/color/mean" and data["metric"]["held_out"]
    assert "metric: eval/color/mean, the held-out evaluation" in out
    assert not [w for w in data["warnings"] if w["kind"] == "training_reward"]
    g = {x["label"]: x for x in data["groups"]}
    # no smoothing of evaluations: the final value is each seed's last evaluation (step 20), from the files' rows
    for label, run_list in (("dance_grpo", runs[:3]), ("fast", runs[3:])):
        assert g[label]["points"] == [5, 5, 5] and g[label]["steps"] == [21, 21, 21]
        assert g[label]["final"]["values"] == pytest.approx([r.rows[20]["eval/color/mean"] for r in run_list])
    # 0.001 apart on every seed, seeds 0.01 apart: paired by seed, the shift is significant
    assert g["fast"]["verdicts"]["final"] == "significant"
    md = (folder / "compare" / "comparison.md").read_text()
    assert "| group | seeds | steps | evaluations | final eval/color/mean (last evaluation), 95% interval |" in md
    assert "| fast | 3 | 21 | 5 | 0.7110 [" in md and "], higher, significant |" in md
    # the same folders on the training reward: fast is then significantly better, and the report says which ruler
    assert main([str(folder), "--axis", "step", "--metric", "reward/mean", "--out", str(tmp_path / "train")]) == 0
    data = json.loads((tmp_path / "train" / "comparison.json").read_text())
    assert data["metric"]["key"] == "reward/mean" and data["warnings"][0]["kind"] == "training_reward"
    assert {x["label"]: x for x in data["groups"]}["fast"]["verdicts"]["final"] == "significant"
    assert "warning (training_reward)" in capsys.readouterr().out


def test_training_reward_fallback_is_said_in_the_report_and_on_the_console(tmp_path, capsys):
    folder = write_sweep(tmp_path, [make_run(m, s, steps=12) for m in ("dance_grpo", "fast") for s in (0, 1)])
    assert main([str(folder)]) == 0
    out = capsys.readouterr().out
    assert "metric: reward/mean, the training reward: these runs logged no held-out evaluation" in out
    assert "warning (training_reward): compared on reward/mean, the training reward, not a held-out evaluation" in out
    md = (folder / "compare" / "comparison.md").read_text()
    assert "Metric: `reward/mean`, the **training reward**" in md
    assert "- **training_reward**: compared on reward/mean, the training reward" in md
    assert "final reward/mean (last 10 steps), 95% interval" in md


def test_metric_choices_that_are_refused(tmp_path):
    mixed = [make_run("dance_grpo", s, eval_every=5) for s in (0, 1)] + [make_run("fast", s) for s in (0, 1)]
    with pytest.raises(
        CompareError,
        match=r"2 of the 4 runs did not log eval/color/mean: fast-s0, fast-s1.*"
        r"--metric reward/mean",
    ):
        choose_metric(mixed)
    assert choose_metric(mixed, "reward/mean").key == "reward/mean"
    # several held-out rewards, none of them the trained one: name one
    other = [
        make_run("dance_grpo", s, eval_every=5, reward="jpeg", extra={"reward.name": "jpeg_compressibility"})
        for s in (0, 1)
    ]
    with pytest.raises(CompareError, match=r"several held-out metrics \(eval/jpeg/mean, eval/pickscore/mean\)"):
        choose_metric(other)
    assert choose_metric(other, "eval/pickscore/mean").held_out
    # the held-out ruler must be the same for every run: other evaluation settings are refused, the cadence is not
    runs = [make_run("dance_grpo", s, eval_every=5) for s in (0, 1)]
    runs += [make_run("fast", s, eval_every=10, extra={"eval.sampling_steps": 40}) for s in (0, 1)]
    folder = write_sweep(tmp_path, runs)
    with pytest.raises(CompareError, match=r"evaluate differently: eval.sampling_steps = 10 \(2 runs\), 40 "):
        grouping.check_ruler(runs)
    assert main([str(folder)]) == 2
    assert main([str(folder), "--allow-mixed", "eval.sampling_steps"]) == 0


# -- thin evidence ------------------------------------------------------------------------------------------------
def _kinds(data):
    return [w["kind"] for w in data["warnings"]]


def test_the_issue_case_two_steps_one_seed_gives_warnings_and_no_confident_speedup(tmp_path, capsys):
    # `rewardflow -m method=dance_grpo,jagg,flash_grpo trainer.steps=2`: 1 seed, 2 steps, erratic step times.
    # jagg starts above dance_grpo's final reward, so it "reaches" it at its first step: a 2.85x-style speedup.
    runs = [
        make_run("dance_grpo", 0, steps=2, step_s=[3.0, 2.0]),
        make_run("jagg", 0, steps=2, base=0.52, step_s=[2.0, 0.7]),
        make_run("flash_grpo", 0, steps=2, base=0.4, step_s=[1.0, 1.5]),
    ]
    folder = write_sweep(tmp_path, runs)
    assert main([str(folder), "--baseline", "dance_grpo"]) == 0
    out = capsys.readouterr().out
    data = json.loads((folder / "compare" / "comparison.json").read_text())
    assert _kinds(data) == ["training_reward", "few_seeds", "few_points", "short_window", "reached_at_first"]
    for kind in _kinds(data):
        assert f"warning ({kind})" in out
    md = (folder / "compare" / "comparison.md").read_text()
    assert "## Read this first: thin evidence" in md
    assert "final reward/mean (last 2 steps)" in md and "last 10 steps" not in md
    jagg = {g["label"]: g for g in data["groups"]}["jagg"]
    assert jagg["speedup"] == pytest.approx(5.0 / 2.0)  # dance reaches its final at 5 s, jagg at 2 s
    assert jagg["speedup_interval"] == [None, None] and jagg["verdicts"]["reach"] == "untested"
    assert "| 2.50× (no interval: 1 paired seed), untested |" in md
    messages = " ".join(w["message"] for w in data["warnings"])
    assert "dance_grpo, flash_grpo, jagg have 1 seed" in messages
    assert "fewer than --min-points 5 logged steps" in messages
    assert "the mean of the last 2 steps, not 10" in messages and "jagg (1 of 1)" in messages
    # the same sweep evaluated (steps 0 and 1): the column names the evaluation, the warning counts evaluations
    for r in runs:
        for row in r.rows:
            before = row["time/wallclock_s"] - row["time/step_s"]  # an evaluation's compute: the steps before it
            per_s = row["time/gpu_hours"] / row["time/wallclock_s"]
            row.update({"eval/color/mean": row["reward/mean"] + 0.1, "time/eval_s": 5.0})
            row.update({"time/eval_wallclock_s": before, "time/eval_gpu_hours": before * per_s})
    folder = write_sweep(tmp_path / "evaluated", runs)
    assert main([str(folder)]) == 0
    data = json.loads((folder / "compare" / "comparison.json").read_text())
    assert _kinds(data) == ["few_seeds", "few_points", "reached_at_first"]
    assert "fewer than --min-points 5 evaluation points (2: " in data["warnings"][1]["message"]
    assert "final eval/color/mean (last evaluation)" in (folder / "compare" / "comparison.md").read_text()


def test_step_time_spread_between_seeds_warns_that_the_machine_was_loaded(tmp_path):
    loaded, steady = (1.0, 1.3, 0.8), (0.5, 0.505, 0.51)
    runs = [make_run("dance_grpo", s, steps=12, step_s=t) for s, t in enumerate(loaded)]
    runs += [make_run("fast", s, steps=12, step_s=t) for s, t in enumerate(steady)]
    folder = write_sweep(tmp_path, runs)
    assert main([str(folder)]) == 0
    data = json.loads((folder / "compare" / "comparison.json").read_text())
    spread = [w["message"] for w in data["warnings"] if w["kind"] == "step_time_spread"]
    cv = np.std(loaded, ddof=1) / np.mean(loaded)  # 0.2404
    assert len(spread) == 1 and spread[0].startswith(f"the seeds of dance_grpo ({cv:.1%}) differ in seconds per step")
    assert np.std(steady, ddof=1) / np.mean(steady) < 0.05  # fast: 1%, no warning
    assert main([str(folder), "--max-step-cv", "0.25", "--out", str(tmp_path / "lenient")]) == 0
    data = json.loads((tmp_path / "lenient" / "comparison.json").read_text())
    assert "step_time_spread" not in _kinds(data)


def test_each_threshold_is_an_option(tmp_path):
    runs = [make_run(m, 0, steps=3) for m in ("dance_grpo", "fast")]
    folder = write_sweep(tmp_path, runs)
    assert main([str(folder)]) == 0
    kinds = _kinds(json.loads((folder / "compare" / "comparison.json").read_text()))
    assert {"few_seeds", "few_points", "short_window"} <= set(kinds)
    assert (
        main([str(folder), "--min-seeds", "1", "--min-points", "3", "--smooth", "3", "--out", str(tmp_path / "quiet")])
        == 0
    )
    kinds = _kinds(json.loads((tmp_path / "quiet" / "comparison.json").read_text()))
    assert not {"few_seeds", "few_points", "short_window"} & set(kinds)
    assert main([str(folder), "--min-points", "0"]) == 2


# -- the W&B online path, through a fake wandb.Api ---------------------------------------------------------------
class FakeRun:
    """The attributes of ``wandb.apis.public.Run`` that the loader uses."""

    def __init__(self, data: RunData, job_type=None, state="finished"):
        self.id, self.name, self.group, self.state = data.run_id, data.name, data.group, state
        self.job_type, self.tags = job_type, ["sweep"]
        # the public API returns the config unwrapped and W&B's own "_wandb" key alongside
        self.config = {"_wandb": {"cli_version": "0.31.0"}, **data.config}
        self.url = f"https://wandb.ai/me/proj/runs/{data.run_id}"
        self._rows = data.rows

    def scan_history(self, keys=None, page_size=1000, min_step=0, max_step=None):
        for row in self._rows:  # W&B adds _step/_runtime/_timestamp and stores images as dicts
            yield {**row, "_step": row["step"], "_runtime": 1.0, "samples": {"_type": "image-file", "path": "x.png"}}


class FakeApi:
    def __init__(self, runs):
        self._runs, self.calls = runs, []

    def runs(self, path, filters=None, order="+created_at", per_page=50, **kw):
        self.calls.append((path, filters))
        group = (filters or {}).get("group")
        return [r for r in self._runs if group is None or r.group == group]


def test_online_path_reads_runs_through_the_public_api(tmp_path):
    data = [make_run("dance_grpo", s, steps=12, step_s=1.0) for s in (0, 1)]
    data += [make_run("flow_grpo_fast", s, steps=12, step_s=0.5, slope=0.02) for s in (0, 1)]
    fakes = [FakeRun(d) for d in data]
    fakes.append(FakeRun(make_run("dance_grpo", 9), job_type="compare"))  # a previous summary run: skipped
    fakes.append(FakeRun(make_run("dance_grpo", 5, group="other")))  # another group: filtered by the API
    api = FakeApi(fakes)
    out = tmp_path / "cmp"
    assert (
        main(
            ["--project", "me/proj", "--group", "sweep-x", "--out", str(out), "--smooth", "3", "--axis", "wallclock_s"],
            api=api,
        )
        == 0
    )
    assert api.calls == [("me/proj", {"group": "sweep-x"})]
    result = json.loads((out / "comparison.json").read_text())
    g = {x["label"]: x for x in result["groups"]}
    assert set(g) == {"dance_grpo", "flow_grpo_fast"} and g["dance_grpo"]["seeds"] == 2
    # final = trailing mean of the last 3 of 0.5 + 0.01 i (i = 9, 10, 11) -> 0.6 for dance; 0.5 + 0.02 * 10 = 0.7
    assert g["dance_grpo"]["final"]["mean"] == pytest.approx(0.60)
    assert g["flow_grpo_fast"]["final"]["mean"] == pytest.approx(0.70)
    # dance's smoothed curve reaches 0.6 at its last step (12 s); fast's, 0.5 + 0.02 (i - 1) = 0.6 at i = 6: 3.5 s
    assert g["dance_grpo"]["reach"]["mean"] == pytest.approx(12.0)
    assert g["flow_grpo_fast"]["reach"]["mean"] == pytest.approx(3.5)
    assert g["flow_grpo_fast"]["speedup"] == pytest.approx(12.0 / 3.5)
    assert all(r["source"].startswith("https://wandb.ai/me/proj/runs/") for r in g["dance_grpo"]["runs"])
    md = (out / "comparison.md").read_text()
    # identical seeds: zero-width intervals, so any difference is significant
    assert "| flow_grpo_fast | 2 | 12 | 0.7000 [0.7000, 0.7000], higher, significant |" in md
    assert f"| {12 / 3.5:.2f}× [{12 / 3.5:.2f}, {12 / 3.5:.2f}], faster, significant |" in md
    for png in ("reward_vs_step.png", "reward_vs_wallclock_s.png", "reward_vs_gpu_hours.png", "time_per_step.png"):
        assert (out / png).stat().st_size > 5000


def test_online_api_failure_is_a_message(tmp_path, capsys):
    class Broken:
        def runs(self, *a, **k):
            raise PermissionError("401 unauthorized")

    assert main(["--project", "me/proj", "--out", str(tmp_path)], api=Broken()) == 2
    err = capsys.readouterr().err
    assert "could not list runs of 'me/proj'" in err and "401" in err and "Traceback" not in err
    assert main(["--project", "me/proj", "--group", "nope", "--out", str(tmp_path)], api=FakeApi([])) == 2
    assert "no runs in 'me/proj'" in capsys.readouterr().err


# -- publishing to W&B --------------------------------------------------------------------------------------------
def _small_comparison(eval_every=0):
    runs = [make_run("dance_grpo", s, steps=6, eval_every=eval_every) for s in (0, 1)]
    runs += [make_run("fast", s, steps=6, step_s=0.5, eval_every=eval_every) for s in (0, 1)]
    return _compare(runs, smooth=2)


def test_summary_run_fallback_logs_tables_and_figures(tmp_path):
    from launcher.compare import plots
    from launcher.compare.publish import log_summary_run
    from launcher.tracking.wandb_offline import find_offline_runs, read_offline_run

    c = _small_comparison()
    figures = plots.reward_figures(c, tmp_path)
    where = log_summary_run(c, "me/proj", "# tables", tmp_path, figures, mode="offline")
    import wandb

    wandb.teardown()  # the wandb-core service writes the offline file asynchronously; this flushes it
    runs = find_offline_runs(tmp_path)
    assert len(runs) == 1 and str(runs[0]) == where
    run = read_offline_run(runs[0])
    assert run.group == "sweep-x" and "compare" in run.tags
    row = {k: v for r in run.history for k, v in r.items()}  # nested media keys read back as a/b/_type
    assert row["compare/groups/_type"] == row["compare/curves/_type"] == "table-file"
    assert row["compare/report/_type"] == "html-file" and row["compare/reward_vs_gpu_hours/_type"] == "image-file"
    table = json.loads((runs[0] / "files" / row["compare/groups/path"]).read_text())
    rows = [dict(zip(table["columns"], r)) for r in table["data"]]
    assert [r["group"] for r in rows] == ["dance_grpo", "fast"]
    fast = c.groups[1]
    assert (rows[1]["speedup"], rows[1]["speedup_lo"], rows[1]["speedup_hi"]) == pytest.approx(
        (fast.speedup, fast.speedup_lo, fast.speedup_hi)
    )
    assert (rows[1]["final_lo"], rows[1]["final_hi"]) == pytest.approx((fast.final.lo, fast.final.hi))
    assert rows[1]["final_vs_baseline"] == fast.verdicts["final"] and rows[0]["final_vs_baseline"] is None
    assert run.summary["compare/dance_grpo/final"] == pytest.approx(c.groups[0].final.mean)
    assert run.summary["compare/warnings"] == [w.message for w in c.warnings]
    assert run.config["compare"]["baseline"] == "dance_grpo" and run.config["compare"]["metric"] == "reward/mean"


def test_report_builder_with_the_report_api():
    wr = pytest.importorskip("wandb_workspaces.reports.v2")
    from launcher.compare.publish import build_report

    c = _small_comparison(eval_every=2)
    assert c.metric.key == "eval/color/mean"
    report = build_report(wr, c, "me/proj", ["method.name"], "# tables")
    # report.save() (and the spec it uploads) need wandb.ai; check the objects it would upload
    assert (report.entity, report.project) == ("me", "proj")
    text, grid = report.blocks
    assert text.text == "# tables"
    runset = grid.runsets[0]
    assert runset.filters == "ID in ['dance_grpo-s0', 'dance_grpo-s1', 'fast-s0', 'fast-s1']"
    assert runset.groupby == ["config.method.name"]
    # every held-out metric (the compared one first) and the training reward, each against the three axes
    curves = [(p.y, p.x) for p in grid.panels if p.y and p.y[0].endswith("/mean")]
    evaluation_axes = ("step", "time/eval_wallclock_s", "time/eval_gpu_hours")  # an evaluation's own compute
    assert curves == [
        *(([key], x) for key in ("eval/color/mean", "eval/pickscore/mean") for x in evaluation_axes),
        *((["reward/mean"], x) for x in ("step", "time/wallclock_s", "time/gpu_hours")),
    ]
    titles = [p.title for p in grid.panels]
    assert "eval/pickscore/mean (held-out) vs time/eval_gpu_hours" in titles
    assert "reward/mean (training reward) vs step" in titles
    assert any(p.y == ["time/eval_s"] for p in grid.panels)
    # the curves' band is the interval of the mean: W&B's nearest is the standard error
    assert {p.groupby_rangefunc for p in grid.panels if p.y == ["eval/color/mean"]} == {"stderr"}
