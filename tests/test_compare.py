"""rewardflow-compare on synthetic runs (seconds): the aggregation math against closed forms, the refusals of empty
and mixed groups, the W&B online path through a fake ``wandb.Api``, and the W&B summary run (offline)."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from launcher.compare import aggregate, grouping
from launcher.compare.cli import main
from launcher.compare.errors import CompareError
from launcher.compare.runs import RunData, clean_rows


def make_run(method="dance_grpo", seed=0, steps=20, slope=0.01, base=0.5, step_s=1.0, gpus=1, model="tiny_flux",
             reward="color", extra=None, name=None, group="sweep-x", fwd=36, bwd=12):
    """A run whose reward/mean = base + slope * step and whose steps take ``step_s`` seconds each."""
    rows = []
    for i in range(steps):
        wall = step_s * (i + 1)
        rows.append({"step": i, "reward/mean": base + slope * i, "time/step_s": step_s,
                     "time/rollout_s": 0.5 * step_s, "time/reward_s": 0.1 * step_s, "time/update_s": 0.4 * step_s,
                     "time/wallclock_s": wall, "time/gpu_hours": gpus * wall / 3600,
                     "count/transformer_fwd": fwd, "count/transformer_bwd": bwd})
    config = {"method": {"name": method, "eta": 0.3}, "model": {"name": model}, "reward": {"name": reward},
              "data": {"name": "demo"}, "trainer": {"seed": seed, "steps": steps}, "optimizer": {"lr": 3e-3}}
    for key, value in (extra or {}).items():
        node = config
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    name = name or f"{method}-s{seed}"
    return RunData(run_id=name, name=name, source=f"/runs/{name}", config=config, rows=clean_rows(rows), group=group)


# -- aggregation math ---------------------------------------------------------------------------------------------
def test_trailing_mean_and_spread():
    y = np.array([1.0, 2.0, 3.0, 4.0])
    assert aggregate.trailing_mean(y, 2).tolist() == [1.0, 1.5, 2.5, 3.5]
    assert aggregate.trailing_mean(y, 10).tolist() == [1.0, 1.5, 2.0, 2.5]
    s = aggregate.spread([1.0, 3.0], "std")
    assert (s.mean, s.spread, s.lo, s.hi) == pytest.approx((2.0, math.sqrt(2), 2 - math.sqrt(2), 2 + math.sqrt(2)))
    assert aggregate.spread([1.0, 3.0], "sem").spread == pytest.approx(1.0)
    m = aggregate.spread([1.0, 3.0, 2.5], "minmax")
    assert (m.lo, m.hi) == (1.0, 3.0)
    assert math.isnan(aggregate.spread([2.0], "std").spread)


def test_seed_curve_interpolates_on_the_union_and_holds_finished_seeds():
    a = make_run(seed=0, steps=3, step_s=1.0)            # x = 1, 2, 3 s
    b = make_run(seed=1, steps=4, step_s=0.75)           # x = 0.75, 1.5, 2.25, 3 s
    traces = [aggregate.make_trace(r, 1) for r in (a, b)]
    curve = aggregate.seed_curve(traces, "wallclock_s", "std")
    assert curve.x.tolist() == [1.0, 1.5, 2.0, 2.25, 3.0]      # from the latest first point on
    ya = np.interp(curve.x, [1, 2, 3], [0.5, 0.51, 0.52])
    yb = np.interp(curve.x, [0.75, 1.5, 2.25, 3.0], [0.5, 0.51, 0.52, 0.53])
    assert curve.mean == pytest.approx((ya + yb) / 2)
    assert curve.hi - curve.mean == pytest.approx(np.abs(ya - yb) / math.sqrt(2))
    short = make_run(seed=2, steps=2, step_s=1.0)                 # ends at 2 s and then holds 0.51
    held = aggregate.seed_curve([traces[0], aggregate.make_trace(short, 1)], "wallclock_s", "std")
    assert held.mean[-1] == pytest.approx((0.52 + 0.51) / 2)


def test_seeds_with_the_same_steps_are_averaged_step_by_step():
    a = make_run(seed=0, steps=4, step_s=1.0, base=0.5)              # x = 1, 2, 3, 4 s
    b = make_run(seed=1, steps=4, step_s=2.0, base=0.6)              # x = 2, 4, 6, 8 s
    traces = [aggregate.make_trace(r, 1) for r in (a, b)]
    curve = aggregate.seed_curve(traces, "wallclock_s", "minmax")
    assert curve.x.tolist() == [1.5, 3.0, 4.5, 6.0]
    assert curve.mean == pytest.approx([0.55, 0.56, 0.57, 0.58])
    assert curve.lo == pytest.approx([0.5, 0.51, 0.52, 0.53]) and curve.hi == pytest.approx([0.6, 0.61, 0.62, 0.63])
    # the group reaches its own final reward at its mean total compute, not at its longest seed's end
    assert aggregate.first_reach(curve, 0.58) == pytest.approx(6.0)
    assert aggregate.first_reach(curve, 0.565) == pytest.approx(3.75)
    assert aggregate.first_reach(curve, 0.7) is None


def test_budget_reach_and_speedup_match_closed_forms():
    # reward = 0.5 + 0.01 * step. Baseline: 1 s/step, 20 steps -> final 0.69 reached at step 19 = 20 s.
    # Fast: 0.5 s/step, 30 steps, same per-step gain -> reaches 0.69 at step 19 = 10 s: 2x faster in wall-clock.
    # Slow: a quarter of the gain per step, 20 steps -> never reaches 0.69 (best 0.5475).
    runs = [make_run("dance_grpo", s, steps=20, step_s=1.0) for s in (0, 1)]
    runs += [make_run("fast", s, steps=30, step_s=0.5) for s in (0, 1)]
    runs += [make_run("slow", s, steps=20, step_s=1.0, slope=0.0025) for s in (0, 1)]
    groups = grouping.group_runs(runs, ["method.name"])
    base = grouping.select_baseline(groups, None)
    c = aggregate.compare(groups, base, aggregate.Settings(axis="wallclock_s", smooth=1))
    g = {r.label: r for r in c.groups}
    assert c.baseline == "dance_grpo" and c.target == pytest.approx(0.69)
    assert c.budget == pytest.approx(15.0)                         # the fast runs' 30 x 0.5 s
    assert g["dance_grpo"].reach == pytest.approx(20.0) and g["fast"].reach == pytest.approx(10.0)
    assert g["fast"].speedup == pytest.approx(2.0) and g["dance_grpo"].speedup == pytest.approx(1.0)
    assert g["slow"].reach is None and g["slow"].speedup is None and g["slow"].best == pytest.approx(0.5475)
    # at 15 s: baseline at step 14 (0.64), fast at its end (step 29: 0.79), slow at step 14 (0.535)
    assert g["dance_grpo"].at_budget.mean == pytest.approx(0.64)
    assert g["fast"].at_budget.mean == pytest.approx(0.79)
    assert g["slow"].at_budget.mean == pytest.approx(0.535)
    # the step axis counts steps done: the baseline needs 20, fast 20 too -> 1x
    c = aggregate.compare(groups, base, aggregate.Settings(axis="step", smooth=1))
    g = {r.label: r for r in c.groups}
    assert g["dance_grpo"].reach == pytest.approx(20.0) and g["fast"].speedup == pytest.approx(1.0)
    assert c.budget == pytest.approx(20.0)
    # twice the GPUs double GPU-hours: the fast method (on 4 GPUs) loses its edge on the gpu_hours axis
    runs[2:4] = [make_run("fast", s, steps=30, step_s=0.5, gpus=4) for s in (0, 1)]
    groups = grouping.group_runs(runs, ["method.name"])
    c = aggregate.compare(groups, grouping.select_baseline(groups, "dance_grpo"), aggregate.Settings(smooth=1))
    assert {r.label: r for r in c.groups}["fast"].speedup == pytest.approx(0.5)


def test_per_step_costs_leave_out_warmup():
    run = make_run(steps=4, step_s=1.0)
    run.rows[0]["time/step_s"] = 9.0                         # a slow first step (lazy init)
    costs = aggregate.per_step_costs([run], warmup=1, band="std")
    assert costs["time/step_s"].mean == pytest.approx(1.0)
    assert aggregate.per_step_costs([run], warmup=0, band="std")["time/step_s"].mean == pytest.approx(3.0)
    assert costs["count/transformer_fwd"].mean == 36 and costs["count/transformer_bwd"].mean == 12


def test_nan_reward_steps_are_left_out_and_rows_deduplicated():
    run = make_run(steps=5)
    run.rows[2]["reward/mean"] = None
    trace = aggregate.make_trace(run, 1)
    assert trace.x["step"].tolist() == [0, 1, 3, 4]
    rows = clean_rows([{"step": 0, "reward/mean": 1.0}, {"step": 1, "reward/mean": 2.0},
                       {"step": 1, "reward/mean": 3.0, "samples": {"_type": "image-file"}}])
    assert rows == [{"step": 0, "reward/mean": 1.0}, {"step": 1, "reward/mean": 3.0}]


# -- grouping and refusals ----------------------------------------------------------------------------------------
def test_grouping_by_an_extra_key_and_baseline_selection():
    runs = [make_run("flow_grpo_fast", s, extra={"method.window_size": w}, name=f"w{w}s{s}")
            for w in (2, 4) for s in (0, 1)] + [make_run("dance_grpo", s) for s in (0, 1)]
    with pytest.raises(CompareError, match=r"method.window_size = 2 \(2 runs\), 4 \(2 runs\)"):
        grouping.group_runs(runs, ["method.name"])
    groups = grouping.group_runs(runs, ["method.name", "method.window_size"])
    assert [g.label for g in groups] == ["dance_grpo · window_size=(absent)", "flow_grpo_fast · window_size=2",
                                         "flow_grpo_fast · window_size=4"]
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
        for row in self._rows:    # W&B adds _step/_runtime/_timestamp and stores images as dicts
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
    fakes.append(FakeRun(make_run("dance_grpo", 9), job_type="compare"))     # a previous summary run: skipped
    fakes.append(FakeRun(make_run("dance_grpo", 5, group="other")))          # another group: filtered by the API
    api = FakeApi(fakes)
    out = tmp_path / "cmp"
    assert main(["--project", "me/proj", "--group", "sweep-x", "--out", str(out), "--smooth", "3",
                 "--axis", "wallclock_s"], api=api) == 0
    assert api.calls == [("me/proj", {"group": "sweep-x"})]
    result = json.loads((out / "comparison.json").read_text())
    g = {x["label"]: x for x in result["groups"]}
    assert set(g) == {"dance_grpo", "flow_grpo_fast"} and g["dance_grpo"]["seeds"] == 2
    # final = trailing mean of the last 3 of 0.5 + 0.01 i (i = 9, 10, 11) -> 0.6 for dance; 0.5 + 0.02 * 10 = 0.7
    assert g["dance_grpo"]["final_reward"]["mean"] == pytest.approx(0.60)
    assert g["flow_grpo_fast"]["final_reward"]["mean"] == pytest.approx(0.70)
    # dance's smoothed curve reaches 0.6 at its last step (12 s); fast's, 0.5 + 0.02 (i - 1) = 0.6 at i = 6: 3.5 s
    assert g["dance_grpo"]["reach"] == pytest.approx(12.0) and g["flow_grpo_fast"]["reach"] == pytest.approx(3.5)
    assert g["flow_grpo_fast"]["speedup"] == pytest.approx(12.0 / 3.5)
    assert all(r["source"].startswith("https://wandb.ai/me/proj/runs/") for r in g["dance_grpo"]["runs"])
    md = (out / "comparison.md").read_text()
    assert "| flow_grpo_fast | 2 | 12 | 0.7000 ± 0.0000 | 0.7000 ± 0.0000 | 3.5 |" in md and f"{12 / 3.5:.2f}×" in md
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
def _small_comparison():
    runs = [make_run("dance_grpo", s, steps=6) for s in (0, 1)] + [make_run("fast", s, steps=6, step_s=0.5)
                                                                   for s in (0, 1)]
    groups = grouping.group_runs(runs, ["method.name"])
    return aggregate.compare(groups, groups[0], aggregate.Settings(smooth=2))


def test_summary_run_fallback_logs_tables_and_figures(tmp_path):
    from launcher.compare import plots
    from launcher.compare.publish import log_summary_run
    from launcher.wandb_offline import find_offline_runs, read_offline_run

    c = _small_comparison()
    figures = plots.reward_figures(c, tmp_path)
    where = log_summary_run(c, "me/proj", "# tables", tmp_path, figures, mode="offline")
    import wandb

    wandb.teardown()          # the wandb-core service writes the offline file asynchronously; this flushes it
    runs = find_offline_runs(tmp_path)
    assert len(runs) == 1 and str(runs[0]) == where
    run = read_offline_run(runs[0])
    assert run.group == "sweep-x" and "compare" in run.tags
    row = {k: v for r in run.history for k, v in r.items()}       # nested media keys read back as a/b/_type
    assert row["compare/groups/_type"] == row["compare/curves/_type"] == "table-file"
    assert row["compare/report/_type"] == "html-file" and row["compare/reward_vs_gpu_hours/_type"] == "image-file"
    table = json.loads((runs[0] / "files" / row["compare/groups/path"]).read_text())
    assert [r[0] for r in table["data"]] == ["dance_grpo", "fast"]
    assert table["data"][1][6] == pytest.approx(c.groups[1].speedup)          # the speedup column
    assert run.summary["compare/dance_grpo/final_reward"] == pytest.approx(c.groups[0].final.mean)
    assert run.config["compare"]["baseline"] == "dance_grpo"


def test_report_builder_with_the_report_api():
    wr = pytest.importorskip("wandb_workspaces.reports.v2")
    from launcher.compare.publish import build_report

    report = build_report(wr, _small_comparison(), "me/proj", ["method.name"], "# tables")
    # report.save() (and the spec it uploads) need wandb.ai; check the objects it would upload
    assert (report.entity, report.project) == ("me", "proj")
    text, grid = report.blocks
    assert text.text == "# tables"
    runset = grid.runsets[0]
    assert runset.filters == "ID in ['dance_grpo-s0', 'dance_grpo-s1', 'fast-s0', 'fast-s1']"
    assert runset.groupby == ["config.method.name"]
    plots = {p.x: p for p in grid.panels}
    assert {"step", "time/wallclock_s", "time/gpu_hours"} <= set(plots)
    assert plots["time/gpu_hours"].y == ["reward/mean"] and plots["time/gpu_hours"].groupby_rangefunc == "stddev"
