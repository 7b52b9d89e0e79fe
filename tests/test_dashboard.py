"""``rewardflow-dashboard`` (issue 29 item 2; docs/wandb.md#dashboard-template): a W&B workspace built from the
documented metric families (launcher/tracking/metric_names.py), its spec as JSON without the network, a clear
message without W&B credentials, and its local preview drawn from metrics.jsonl files."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from launcher.compare import dashboard
from launcher.compare.dashboard import Dashboard, build_dashboard, main, names_in_runs, to_workspace
from launcher.tracking import metric_names
from launcher.tracking.metric_names import FAMILIES, MetricFamily, family_of

DOCS = ROOT / "docs"
AXES = {metric_names.STEP, *metric_names.COMPUTE_AXES, *metric_names.EVAL_COMPUTE_AXES}


def _referenced(d: Dashboard) -> tuple[set[str], set[str]]:
    names = {m for p in d.panels() for m in (*p.y, p.x)}
    regexes = {p.y_regex for p in d.panels() if p.y_regex}
    return names, regexes


def test_every_family_is_a_section_and_every_documented_metric_is_in_a_panel():
    d = build_dashboard()
    assert [s.family for s in d.sections] == [f.key for f in FAMILIES]
    names, regexes = _referenced(d)
    for family, section in zip(FAMILIES, d.sections):
        assert section.panels and section.title == family.title and section.cuda_only == family.cuda_only
        assert set(family.metrics) <= names, f"{family.key}: {set(family.metrics) - names} in no panel"
        assert set(family.regexes()) <= regexes
    assert d.group_by == ["method.name"] and d.job_type == "train"


def test_a_family_added_to_metric_names_appears_in_the_dashboard(monkeypatch):
    new = MetricFamily("sde", "SDE", "noise level per step", metrics=("sde/eta", "sde/sigma_max"), prefixes=("sde/x_",))
    monkeypatch.setattr(metric_names, "FAMILIES", (*FAMILIES, new))
    d = build_dashboard()
    section = d.sections[-1]
    assert section.family == "sde" and section.title == "SDE"
    assert [p.y for p in section.panels[:2]] == [["sde/eta"], ["sde/sigma_max"]]
    assert section.panels[2].y_regex == "^sde/x_.+$"


def test_panels_reference_only_documented_metrics_and_axes():
    d = build_dashboard()
    for p in d.panels():
        assert p.x in AXES, p
        for y in p.y:
            assert family_of(y) is not None, f"{p.title}: {y} is no documented metric"
        if p.y_regex:
            re.compile(p.y_regex)
            assert any(p.y_regex in f.regexes() for f in FAMILIES)
    # the headline metrics also against the compute axes, an evaluation against its own
    titles = {(p.y[0] if p.y else p.y_regex, p.x) for p in d.panels()}
    assert {("reward/mean", x) for x in metric_names.COMPUTE_AXES} <= titles
    assert {(metric_names.template_regex("eval/<reward>/mean"), x) for x in metric_names.EVAL_COMPUTE_AXES} <= titles
    stacked = [p for p in d.panels() if p.stacked]
    assert [p.y for p in stacked] == [list(metric_names.PHASE_TIMES)]


def test_the_runs_names_fill_the_templates():
    configs = [
        {"reward": {"name": "multi", "components": {"hps": {}, "clip": {}}}, "eval": {"rewards": {"jpeg": {}}}},
        {"reward": {"name": "color"}},
    ]
    names = names_in_runs(configs)
    assert names == {"reward": ["multi", "jpeg", "color"], "component": ["hps", "clip"]}
    d = build_dashboard("sweep-x", names)
    ys = {tuple(p.y) for p in d.panels()}
    assert ("eval/multi/mean", "eval/jpeg/mean", "eval/color/mean") in ys
    assert ("reward/hps", "reward/clip") in ys and ("reward/hps_std", "reward/clip_std") in ys
    # runs without a multi reward log no components: no panel for them, and no regex standing in
    plain = build_dashboard(None, names_in_runs([{"reward": {"name": "color"}}]))
    assert not any("component" in p.title or (p.y_regex or "").startswith("^reward/") for p in plain.panels())


def _doc_names(text: str) -> set[str]:
    """The metric names of docs/metrics.md's table, `_p50`-style shorthand expanded from the name before it."""
    out: set[str] = set()
    for line in text.splitlines():
        if not line.startswith("| `"):
            continue
        last = ""
        for name in re.findall(r"`([^`]+)`", line.split(" | ")[0]):
            if name.startswith("_"):
                name = last.rsplit("_", 1)[0] + name
            out.add(name)
            last = name
    return out - {"step"}


def test_the_families_are_the_documented_metrics():
    text = (DOCS / "metrics.md").read_text()
    fixed = {m for f in FAMILIES for m in f.metrics}
    documented = _doc_names(text)
    assert documented - {"time/eval_wallclock_s", "time/eval_gpu_hours"} <= fixed, documented - fixed
    assert fixed <= documented | {"time/eval_s", "time/eval_wallclock_s", "time/eval_gpu_hours"}, fixed - documented
    evaluation = (DOCS / "evaluation.md").read_text() + text
    for f in FAMILIES:
        for t in f.templates:
            assert f"`{t}`" in evaluation or t in evaluation, t
        for p in f.prefixes:
            assert f"`{p}*`" in text or f"`{p}" in text, p
    assert "time/eval_s" in evaluation


def test_the_json_spec_round_trips(tmp_path, capsys):
    d = build_dashboard("sweep-2026-12-01_10-00-00", {"reward": ["color"], "component": []})
    assert Dashboard.from_dict(json.loads(json.dumps(d.to_dict()))) == d
    out = tmp_path / "dashboard.json"
    assert main(["--json", str(out), "--group", "sweep-2026-12-01_10-00-00"]) == 0
    assert "8 sections" in capsys.readouterr().out
    loaded = Dashboard.from_dict(json.loads(out.read_text()))
    assert (
        loaded == build_dashboard("sweep-2026-12-01_10-00-00")
        and loaded.name == "rewardflow: sweep-2026-12-01_10-00-00"
    )


def test_the_workspace_has_the_specs_sections_panels_and_runs():
    pytest.importorskip("wandb_workspaces")
    from wandb_workspaces import expr

    d = build_dashboard("sweep-a")
    w = to_workspace(d, "me", "rewardflow")
    assert [s.name for s in w.sections] == [s.title for s in d.sections]
    for section, spec in zip(w.sections, d.sections):
        assert len(section.panels) == len(spec.panels)
        for plot, p in zip(section.panels, spec.panels):
            assert plot.x == p.x and plot.groupby_aggfunc == "mean" and plot.groupby_rangefunc == "stddev"
            assert (plot.metric_regex == p.y_regex) if p.y_regex else (list(plot.y) == p.y)
            assert (plot.plot_type == "stacked-area") == p.stacked
    assert w.runset_settings.groupby == [expr.Config("method.name")]
    assert w.runset_settings.filters == """Metric("JobType") == 'train' and Metric("Group") == 'sweep-a'"""
    w._to_model()  # what save() sends is built without the network


def _clean_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_") and k != "NETRC"}
    return {**env, "HOME": str(home), "WANDB_SILENT": "true", **extra}


@pytest.mark.parametrize(
    ("extra", "why"),
    [({}, "no W&B credentials"), ({"WANDB_MODE": "offline", "WANDB_API_KEY": "a" * 40}, "WANDB_MODE=offline")],
)
def test_without_w_and_b_the_command_says_what_to_do(tmp_path, extra, why):
    proc = subprocess.run(
        [sys.executable, "-m", "launcher.compare.dashboard", "--project", "me/rewardflow"],
        cwd=ROOT,
        env=_clean_env(tmp_path, **extra),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.stderr.startswith("rewardflow-dashboard: W&B is not online here (") and why in proc.stderr
    for hint in ("`wandb login`", "`wandb sync <run dir>/wandb/offline-run-*`", "--json", "--preview"):
        assert hint in proc.stderr


def test_a_failed_save_is_a_message(monkeypatch, capsys):
    import launcher.tracking.wandb_logger as wandb_logger

    class Refused:
        def save(self):
            raise PermissionError("permission denied for me/rewardflow")

    monkeypatch.setattr(wandb_logger, "resolve_mode", lambda mode: ("online", "test"))
    monkeypatch.setattr(dashboard, "to_workspace", lambda d, entity, project: Refused())
    assert main(["--project", "me/rewardflow"]) == 1
    err = capsys.readouterr().err
    assert "saving the workspace to me/rewardflow failed (PermissionError: permission denied" in err
    assert "wandb sync" in err


def _run(root: Path, method: str, seed: int, steps: int = 6) -> None:
    run = root / f"{method}_{seed}"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text(
        f"method:\n  name: {method}\nreward:\n  name: color\ntrainer:\n  seed: {seed}\n"
    )
    rows = []
    for s in range(steps):
        if s % 3 == 0:
            rows.append(
                {"step": s, "eval/color/mean": 0.5 + s / 20, "time/eval_wallclock_s": s * 0.1, "time/eval_s": 0.01}
            )
        rows.append(
            {
                "step": s,
                "reward/mean": 0.5 + s / 10 + seed / 100,
                "reward/std": 0.1,
                "loss": 1.0 / (s + 1),
                "time/rollout_s": 0.05,
                "time/reward_s": 0.01,
                "time/update_s": 0.04,
                "time/step_s": 0.1,
                "time/wallclock_s": (s + 1) * 0.1,
                "time/gpu_hours": (s + 1) * 0.1 / 3600,
                "count/transformer_fwd": 36,
                "count/transformer_bwd": 12,
                "health/first_update_ratio_dev_max": 1e-7,
                "health/skipped_updates": 0,
            }
        )
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_the_preview_draws_the_panels_from_local_runs(tmp_path, capsys):
    from PIL import Image

    for method in ("dance_grpo", "jagg"):
        for seed in (0, 1):
            _run(tmp_path / "sweep", method, seed)
    out = tmp_path / "dashboard.png"
    spec = tmp_path / "dashboard.json"
    assert main(["--preview", str(out), "--json", str(spec), str(tmp_path / "sweep")]) == 0
    assert f"dashboard preview: {out} (4 runs)" in capsys.readouterr().out
    with Image.open(out) as image:
        assert image.format == "PNG" and image.width > 500 and image.height > 500
    ys = {tuple(p["y"]) for s in json.loads(spec.read_text())["sections"] for p in s["panels"]}
    assert ("eval/color/mean",) in ys  # the runs' reward named, not a regex


def test_preview_without_runs_is_a_message(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--preview", str(tmp_path / "x.png")])
    assert "add their run or sweep folders" in capsys.readouterr().err
    assert main(["--preview", str(tmp_path / "x.png"), str(tmp_path)]) == 1
    assert "no runs found" in capsys.readouterr().err


def test_the_documented_preview_is_drawn_from_the_stored_runs():
    image = DOCS / "img" / "dashboard_preview.png"
    runs = sorted((DOCS / "img" / "dashboard_preview_runs").glob("*/metrics.jsonl"))
    assert image.stat().st_size < 300_000 and len(runs) == 4
    assert (
        "rewardflow-dashboard --preview docs/img/dashboard_preview.png docs/img/dashboard_preview_runs"
        in (DOCS / "wandb.md").read_text()
    )
