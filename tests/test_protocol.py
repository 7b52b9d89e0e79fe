"""The comparison protocol (docs/comparing.md#comparison-protocol): experiment=protocol for every method, the
validation prompts, optimizer.lr_scale, protocol.target read by rewardflow-compare, and scripts/protocol_select.py's
choice of rate and its "cannot rank"."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import torch

from conftest import compose, group_options
from launcher.validate import validate
from rewardflow.errors import ConfigError
from rewardflow.prompts import load_prompts

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from protocol_select import CANNOT_RANK, Point, Run, select, summary  # noqa: E402


@pytest.mark.parametrize("method", group_options("method"))
def test_the_preset_composes_and_validates_for_every_method(method):
    cfg = compose(["experiment=protocol", f"method={method}"])
    validate(cfg)
    assert cfg.protocol.target == 0.7122 and cfg.protocol.margin == 0.01
    assert cfg.model.name == "tiny_flux_pretrained" and cfg.model.pretrain_steps == 600  # the pre-trained start
    assert cfg.eval.val_split == 4 and cfg.eval.every > 0
    assert cfg.optimizer.lr_scale == 1.0  # the grid multiplies each method's own rate; the preset leaves it


@pytest.mark.parametrize(
    "held_out", [["experiment=protocol"], ["experiment=protocol", "eval.prompts=null", "eval.split=3"]]
)
def test_validation_prompts_are_training_prompts_never_held_out(held_out):
    from launcher.train.data import split_prompts
    from launcher.train.evaluation import held_out_prompts, validation_prompts
    from rewardflow.prompts import held_out_count

    cfg = compose(held_out)
    data = load_prompts(cfg.data.prompts, cfg.data.path, cfg.data.field, cfg.data.encoding)
    train = split_prompts(data, held_out_count(cfg.eval))[0]
    val, test = validation_prompts(cfg), held_out_prompts(cfg)
    assert len(val) == 4 and set(val) <= set(train) and test
    assert not set(val) & set(test)
    assert validation_prompts(compose([*held_out, "eval.val_split=0"])) == []


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["eval.val_split=100"], "eval.val_split=100 takes every one of the"),
        (["eval.val_split=-1"], "eval.val_split: must be >= 0"),
        (["eval.every=0"], "eval.val_split: 4 scores training prompts at each evaluation, and eval.every=0"),
        (["optimizer.lr_scale=0"], "optimizer.lr_scale: must be a finite number > 0"),
        (["protocol.margin=-0.1"], "protocol.margin: must be >= 0"),
    ],
)
def test_bad_protocol_settings_name_their_key(overrides, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        validate(compose(["experiment=protocol", *overrides]))


def test_lr_scale_multiplies_the_rate_the_optimizer_is_built_and_rebased_with():
    from launcher.train.lr_schedule import build_lr_schedule, build_optimizer, rebase

    cfg = compose(["optimizer.lr=1e-3", "optimizer.lr_scale=3.16"]).optimizer
    opt = build_optimizer(cfg, [torch.nn.Parameter(torch.zeros(2))])
    assert opt.param_groups[0]["lr"] == pytest.approx(3.16e-3)
    sched = build_lr_schedule(opt, cfg, 10)
    rebase(opt, sched, compose(["optimizer.lr=1e-3", "optimizer.lr_scale=0.316"]).optimizer)
    assert opt.param_groups[0]["lr"] == pytest.approx(3.16e-4) and sched.base_lrs == [pytest.approx(3.16e-4)]


def test_compare_takes_the_target_from_the_runs_config_and_target_overrides_it(tmp_path):
    from launcher.compare.cli import main
    from test_compare import make_run, write_sweep

    fixed = {"protocol.target": 0.62, "protocol.margin": 0.01}
    runs = [make_run(m, s, eval_every=5, extra=fixed) for m in ("dance_grpo", "jagg") for s in (0, 1)]
    sweep = write_sweep(tmp_path, runs)
    assert main([str(sweep), "--axis", "step", "--out", str(tmp_path / "a")]) == 0
    data = json.loads((tmp_path / "a" / "comparison.json").read_text())
    assert data["target"] == 0.62 and data["settings"]["margin"] == 0.01
    assert "protocol.target = 0.62" in data["settings"]["target_from"]
    assert "protocol.target = 0.62 in every run's config" in (tmp_path / "a" / "comparison.md").read_text()
    assert main([str(sweep), "--target", "0.61", "--axis", "step", "--out", str(tmp_path / "b")]) == 0
    data = json.loads((tmp_path / "b" / "comparison.json").read_text())
    assert data["target"] == 0.61 and data["settings"]["target_from"] == "given with --target"


def test_compare_refuses_runs_whose_protocol_targets_differ(tmp_path, capsys):
    from launcher.compare.cli import main
    from test_compare import make_run, write_sweep

    # two groups, each consistent, under two protocols (within a group, grouping refuses the mix first)
    runs = [
        make_run(m, s, eval_every=5, extra={"protocol.target": t})
        for m, t in (("dance_grpo", 0.6), ("jagg", 0.61))
        for s in (0, 1)
    ]
    assert main([str(write_sweep(tmp_path, runs)), "--axis", "step", "--out", str(tmp_path / "c")]) == 2
    assert "these runs fix protocol.target differently: 0.6 (2 runs), 0.61 (2 runs)" in capsys.readouterr().err


def run(method, scale, seed, val, test, passes=(0.0, 100.0, 200.0)):
    """A synthetic run whose scores rise linearly from 0.5 to ``val`` / ``test`` over ``passes``."""
    n = len(passes) - 1
    points = [Point(p, p / 10, 0.5 + (val - 0.5) * i / n, 0.5 + (test - 0.5) * i / n) for i, p in enumerate(passes)]
    return Run(method, scale, seed, points)


NOISE = [0.003, -0.002, 0.004, -0.005, 0.001]


def test_the_rate_is_chosen_on_validation_and_the_held_out_score_reported_at_it():
    runs = []
    for seed, e in enumerate(NOISE):
        # a: rate 1 is best on validation although rate 3.16 would score higher held out: the report must not peek
        runs += [run("a", 1.0, seed, 0.80 + e, 0.70 + e), run("a", 3.16, seed, 0.75 + e, 0.90 + e)]
        # b: 4 x the passes per run; the common budget (200 passes) is a quarter of b's run
        runs += [run("b", 1.0, seed, 0.60 + e, 0.60 + e, (0.0, 400.0, 800.0))]
    result = select(runs, margin=0.01, target=0.65, baseline="b")
    assert result["budget_passes"] == 200.0
    assert list(result["methods"]) == ["b", "a"]  # the baseline first
    a = result["methods"]["a"]
    assert a["best_lr_scale"] == 1.0
    assert a["test_at_budget"]["mean"] == pytest.approx(0.70 + sum(NOISE) / 5)
    assert a["grid"]["3.16"]["test"]["mean"] == pytest.approx(0.90 + sum(NOISE) / 5)
    b = result["methods"]["b"]
    assert b["test_at_budget"]["mean"] == pytest.approx(0.525 + sum(NOISE) / 20)  # a quarter of the way: 0.5 + 0.1 / 4
    assert b["test_final"]["mean"] == pytest.approx(0.60 + sum(NOISE) / 5)
    assert a["passes_to_target"]["mean"] == pytest.approx(150.0, rel=0.05) and a["reached_target"] == "5 of 5"
    (pair,) = result["pairs"]
    assert pair["ranked"] and pair["order"] == "a > b" and result["verdict"] == "ranks a > b"
    assert summary(result)[0].startswith("**Ranked**")


def test_no_significant_difference_says_cannot_rank():
    runs = []
    for seed, e in enumerate(NOISE):
        runs += [run("a", 1.0, seed, 0.8, 0.70 + 10 * e), run("b", 1.0, seed, 0.8, 0.70 - 10 * e)]
    result = select(runs, margin=None, target=None)
    assert result["verdict"] == CANNOT_RANK and not result["pairs"][0]["ranked"]
    assert "Cannot rank the methods" in summary(result)[0]


def test_a_significant_difference_below_the_margin_does_not_rank():
    runs = []
    for seed, e in enumerate(NOISE):
        runs += [run("a", 1.0, seed, 0.8, 0.705 + e), run("b", 1.0, seed, 0.8, 0.70 + e)]
    result = select(runs, margin=0.01, target=None)
    assert result["pairs"][0]["verdict"] == "significant" and result["verdict"] == CANNOT_RANK
    assert "by at least the margin 0.01" in summary(result)[0]


@pytest.mark.slow  # builds the tiny twin and trains: minutes on the loaded 2-core machine
def test_training_logs_validation_scores_beside_the_held_out_ones_at_the_same_compute(tmp_path):
    from launcher.train.trainer import RunInfo, Trainer

    smoke = ["method.group_size=2", "method.prompts_per_step=2", "method.sampling_steps=6", "method.update_batch=4"]
    cfg = compose(
        [
            "experiment=protocol",
            "model.pretrain_steps=4",  # the pre-trained twin's folder, not its quality, is under test here
            *smoke,
            "logger=none",
            "trainer.export=false",
            "trainer.progress=false",
            "trainer.sample_every=0",
            "trainer.steps=2",
            "eval.every=2",
            "eval.samples_per_prompt=1",
            "~reward@eval.rewards.diversity",  # it compares a prompt's samples: 2 or more
        ]
    )
    Trainer(cfg, RunInfo(run_dir=tmp_path)).fit()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if "eval/color/mean" in r]
    assert [r["step"] for r in evals] == [0, 2]
    for r in evals:
        assert 0 < r["val/color/mean"] < 1 and r["val/color/std"] >= 0
        assert {"time/eval_wallclock_s", "time/eval_gpu_hours"} <= set(r) and not any(
            k.startswith("time/wallclock") for k in r
        )
    assert evals[0]["time/eval_wallclock_s"] == 0.0


# ------------------------------------------------------------------ the page, written from the stored data
def stored(runs: list[Run], quick: bool = False, margin: float = 0.01) -> dict:
    """scripts/protocol.py's JSON for ``runs``: the design, the settings fixed before them, the raw runs."""
    methods = sorted({r.method for r in runs})
    return {
        "stem": "protocol_quick" if quick else "protocol",
        "quick": quick,
        "size": "quick" if quick else "full",
        "methods": methods,
        "lr_scales": sorted({r.lr_scale for r in runs}),
        "seeds": sorted({r.seed for r in runs}),
        "steps": 150,
        "overrides": [],
        "baseline": "b",
        "command": "nice -n 10 .venv/bin/python scripts/protocol.py",
        "machine": "x86_64, 2 CPUs",
        "date": "2026-12-05",
        "fixed": {"base_score": 0.5, "base_prompts": 8, "samples_per_prompt": 2, "rule": "0.5000 + 0.2 x (1 - 0.5000)",
                  "target": 0.6, "margin": margin, "pretrain_steps": 600, "fixed_at": "2026-12-05 22:00:00 UTC",
                  "sweep_started_at": "2026-12-05 22:01:00 UTC", "work": "/tmp/w"},
        "runs": [{"method": r.method, "lr_scale": r.lr_scale, "seed": r.seed, "target": 0.6, "margin": margin,
                  "source": f"/tmp/w/{i}",
                  "points": [[p.passes, p.device_s, p.val, p.test] for p in r.points]} for i, r in enumerate(runs)],
    }  # fmt: skip


def page_of(data):
    from claim_studies import protocol_report

    return protocol_report.page(json.loads(json.dumps(data)))  # as read back from the file


def test_the_page_names_each_claim_against_the_baseline_in_the_fixed_words():
    from claim_studies.verdicts import VERDICTS

    runs = []
    for seed, e in enumerate(NOISE):
        runs += [run("a", 1.0, seed, 0.8, 0.70 + e), run("b", 1.0, seed, 0.8, 0.60 + e / 2)]  # a: about +0.10
        runs += [run("c", 1.0, seed, 0.8, 0.60 + 10 * e)]  # c: level with b within its noise
    text = page_of(stored(runs))
    assert (
        "protocol.target = 0.5000 + 0.2 x (1 - 0.5000) = **0.6000**" in text and "fixed at 2026-12-05 22:00:00" in text
    )
    assert "95 % Student t over seeds" in text and "Holm-corrected" in text
    assert re.search(r"\| a \| \+0\.1001 \[\+0\.09\d\d, \+0\.10\d\d\] \| [^|]+ \| \*\*reproduced\*\* \|", text)
    assert re.search(r"\| c \| [^|]+ \| [^|]+ \| \*\*not shown\*\* \|", text)
    words = set(re.findall(r"\*\*(reproduced|not shown|inconclusive|refuted|[a-z ]+)\*\* \|", text))
    assert words <= set(VERDICTS)
    assert "## Each method against the baseline (b)" in text and "method - b" in text


def test_fewer_than_five_seeds_is_inconclusive_and_a_small_gain_refutes_the_margin():
    few = [
        r
        for seed, e in enumerate(NOISE[:2])
        for r in (run("a", 1.0, seed, 0.8, 0.9 + e), run("b", 1.0, seed, 0.8, 0.6 + e))
    ]
    assert "**inconclusive** | 2 paired seeds (< 5)" in page_of(stored(few, quick=True))
    small = [
        r
        for seed, e in enumerate(NOISE)
        for r in (run("a", 1.0, seed, 0.8, 0.702 + e), run("b", 1.0, seed, 0.8, 0.70 + e / 2))
    ]
    assert re.search(r"\| a \| \+0\.0021 \[[^]]+\] \| [^|]+ \| \*\*refuted\*\* \|", page_of(stored(small)))


def test_nothing_clears_the_margin_says_cannot_rank_the_methods():
    runs = [
        r
        for seed, e in enumerate(NOISE)
        for r in (run("a", 1.0, seed, 0.8, 0.70 + 10 * e), run("b", 1.0, seed, 0.8, 0.70 - 10 * e))
    ]
    assert "**Cannot rank the methods**" in page_of(stored(runs))


def test_the_readme_block_says_when_only_the_quick_form_ran():
    from claim_studies import protocol_report

    quick = stored(
        [r for seed in (0, 1) for r in (run("a", 1.0, seed, 0.8, 0.7), run("b", 1.0, seed, 0.8, 0.7))], quick=True
    )
    block = protocol_report.readme_block(None, quick)
    assert block.startswith("**No full run of the comparison protocol exists yet** (75 runs;")
    assert "Only the quick form ran" in block and "its figures mean nothing" in block
    assert "protocol_quick.md" in block
    assert protocol_report.readme_block(None, None).endswith("`nice -n 10 .venv/bin/python scripts/protocol.py`.")
    full = stored(
        [
            r
            for seed, e in enumerate(NOISE)
            for r in (run("a", 1.0, seed, 0.8, 0.8 + e), run("b", 1.0, seed, 0.8, 0.7 + e))
        ]
    )
    block = protocol_report.readme_block(full, quick)
    assert "No full run" not in block and "a > b" in block and "docs/results/protocol.md" in block


def test_the_page_follows_the_stored_runs_not_the_code():
    runs = [
        r
        for seed, e in enumerate(NOISE)
        for r in (run("a", 1.0, seed, 0.8, 0.8 + e), run("b", 1.0, seed, 0.8, 0.7 + e))
    ]
    data = stored(runs)
    before = page_of(data)
    data["runs"][0]["points"][-1][3] -= 0.3  # one seed of a ends far lower held out
    assert page_of(data) != before


def test_the_target_is_fixed_once_before_the_runs_and_read_back_by_a_rerun(tmp_path, monkeypatch):
    """scripts/protocol.py phase 1 stores the fixed settings in the results JSON before any run (``--fix-only`` stops
    there); a re-run of the same design reads them back and fixes nothing anew; another design fixes its own."""
    import protocol

    calls = []

    def fix(work, size, extra):
        calls.append(list(extra))
        return {"base_score": 0.5, "base_prompts": 8, "samples_per_prompt": 1, "rule": "0.5000 + 0.2 x (1 - 0.5000)",
                "target": 0.6, "margin": 0.01, "pretrain_steps": size["pretrain_steps"], "fixed_at": protocol.now()}  # fmt: skip

    def no_sweep(*args, **kwargs):
        raise AssertionError("--fix-only runs no method")

    monkeypatch.setattr(protocol, "fix", fix)
    monkeypatch.setattr(protocol, "sweep", no_sweep)
    args = ["--quick", "--fix-only", "--out", str(tmp_path), "--work", str(tmp_path / "work")]
    assert protocol.main(args) == 0 and len(calls) == 1
    saved = json.loads((tmp_path / "protocol_quick.json").read_text())
    assert saved["fixed"]["target"] == 0.6 and saved["fixed"]["sweep_started_at"] is None and saved["runs"] == []
    assert "before any method ran (`--fix-only`)" in (tmp_path / "protocol_quick.md").read_text()
    assert protocol.main(args) == 0 and len(calls) == 1  # the same design: read back, not fixed again
    assert protocol.main([*args, "eval.samples_per_prompt=2"]) == 0 and calls[-1] == ["eval.samples_per_prompt=2"]
