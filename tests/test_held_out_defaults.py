"""Evaluation on by default where it can be (issue 28 item 2; docs/evaluation.md#held-out-prompts): data=file holds
``eval.default_split`` prompts out of training and evaluates them, an explicit ``eval.prompts`` wins over that default
split, an explicit ``eval.split`` together with ``eval.prompts`` stays an error, a run that does not evaluate trains
on every prompt, and every paper preset evaluates."""

from __future__ import annotations

import json
import re

import pytest

from conftest import compose, group_options
from launcher.train.evaluation import held_out_prompts
from launcher.validate import validate
from rewardflow.errors import ConfigError
from rewardflow.prompt_sets import SETS, PromptSet, Split
from rewardflow.prompts import held_out_count

COLOURS = ("red", "green", "blue", "yellow", "cyan", "magenta", "white", "black")
#: 40 prompts that each name a colour (reward=color needs one)
PROMPTS = [f"a {c} {thing}" for thing in ("square", "tree", "car", "house", "cat") for c in COLOURS]


@pytest.fixture
def prompt_file(tmp_path):
    path = tmp_path / "prompts.txt"
    path.write_text("\n".join(PROMPTS) + "\n")
    return path


# ---------------------------------------------------------------------------------------------- the precedence
def test_data_file_evaluates_held_out_prompts_of_the_file_by_default(prompt_file):
    cfg = compose(["data=file", f"data.path={prompt_file}"])
    assert cfg.eval.every == 50 and cfg.eval.split is None and cfg.eval.prompts is None
    assert held_out_count(cfg.eval) == cfg.eval.default_split == 32
    train, held_out = validate(cfg), held_out_prompts(cfg)
    assert len(train) == 8 and len(held_out) == 32
    assert sorted(train + held_out) == sorted(PROMPTS) and not set(train) & set(held_out)


def test_an_explicit_eval_prompts_wins_over_the_default_split(prompt_file, tmp_path):
    held = tmp_path / "held_out.txt"
    held.write_text("a red car\na blue circle\n")
    cfg = compose(["data=file", f"data.path={prompt_file}", f"eval.prompts={held}"])
    assert held_out_count(cfg.eval) == 0
    assert validate(cfg) == PROMPTS  # every prompt of the file is trained on
    assert held_out_prompts(cfg) == ["a red car", "a blue circle"]


def test_an_explicit_eval_split_replaces_the_default_one(prompt_file):
    cfg = compose(["data=file", f"data.path={prompt_file}", "eval.split=5"])
    assert held_out_count(cfg.eval) == 5 and len(validate(cfg)) == 35 and len(held_out_prompts(cfg)) == 5
    off = compose(["data=file", f"data.path={prompt_file}", "eval.every=0"])
    assert held_out_count(off.eval) == 0 and validate(off) == PROMPTS  # no evaluation: every prompt trained on
    kept = compose(["data=file", f"data.path={prompt_file}", "eval.split=5", "eval.every=0"])
    assert validate(kept) == validate(cfg)  # an explicit split holds the same prompts out, evaluating or not


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["eval.prompts=[a red car]", "eval.split=5"], "eval.split: eval.prompts and eval.split=5 both choose"),
        (["eval.split=0"], "eval.every: 50 evaluates held-out prompts, and none are set"),
        (["eval.split=-1"], "eval.split: must be >= 0 (got -1)"),
        (["eval.default_split=-2"], "eval.default_split: must be >= 0 (got -2)"),
        (["eval.default_split=40"], "eval.default_split=40: data=file holds 40 prompts out of training"),
    ],
)
def test_bad_held_out_settings_of_data_file_are_config_errors(prompt_file, overrides, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        validate(compose(["data=file", f"data.path={prompt_file}", *overrides]))


def test_a_file_too_small_for_the_default_split_names_the_key_and_the_fixes(tmp_path):
    path = tmp_path / "few.txt"
    path.write_text("\n".join(PROMPTS[:10]) + "\n")
    with pytest.raises(ConfigError) as err:
        validate(compose(["data=file", f"data.path={path}"]))
    message = str(err.value)
    assert "eval.default_split=32" in message and "the file has 10" in message
    assert "eval.split=N" in message and "eval.prompts=" in message and "eval.every=0" in message


# ------------------------------------------------------------------------------------------------------ a run
def test_a_data_file_run_trains_on_the_rest_and_evaluates_the_held_out_prompts(prompt_file, tmp_path):
    """A tiny run with data=file and no evaluation setting: the prompts it trains on and the prompts it evaluates are
    disjoint and make up the file; evaluations come at step 0 and at the end. (eval.default_split=4 instead of 32
    keeps the run short; the split is the default one: eval.split is unset.)"""
    from launcher.train.trainer import RunInfo, Trainer

    cfg = compose(
        [
            "experiment=smoke",
            "logger=none",
            "trainer.export=false",
            "trainer.steps=2",
            "data=file",
            f"data.path={prompt_file}",
            "eval.every=50",  # data=file's: only step 0 and the end fall in a 2-step run
            "eval.default_split=4",
        ]
    )
    assert cfg.eval.split is None
    trainer = Trainer(cfg, RunInfo(run_dir=tmp_path))
    trainer.fit()
    train, held_out = trainer.data.prompts, trainer.evaluator.prompts
    assert len(held_out) == 4 and len(train) == 36
    assert not set(train) & set(held_out) and sorted(train + held_out) == sorted(PROMPTS)
    seen = {p for step in range(2) for p in trainer.data.batch(step, cfg.method.prompts_per_step)}
    assert seen <= set(train)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "eval/color/mean" in r] == [0, 2]


# ------------------------------------------------------------------------------------------------------ presets
#: presets that are not a paper's setting: the 3-step smoke test (evaluation off on purpose), the comparison
#: protocol (the demo's held-out prompts) and the Gaussian toys (no prompts)
NOT_PAPERS = {"smoke", "protocol", "toy_am", "toy_eam"}
PAPERS = [p for p in group_options("experiment") if p not in NOT_PAPERS]


def held_out_source(cfg) -> str:
    """What the evaluation of ``cfg`` scores, read from the config alone (nothing downloaded): a description, or ''."""
    e = cfg.eval
    if e.prompts is not None:
        return f"eval.prompts={e.prompts}" if e.prompts else ""
    if held_out_count(e) > 0:
        return f"{held_out_count(e)} prompts of data={cfg.data.name} held out"
    if cfg.data.set is not None and Split.test in SETS[PromptSet(cfg.data.set)].splits:
        return f"the test split of data={cfg.data.set}"
    return ""


@pytest.mark.parametrize("preset", [p for p in group_options("experiment") if p != "smoke"])
def test_every_preset_evaluates_held_out_prompts(preset):
    cfg = compose([f"experiment={preset}"])
    assert cfg.eval.every > 0, f"experiment={preset} does not evaluate"
    assert held_out_source(cfg), f"experiment={preset} has no held-out prompts"


@pytest.mark.parametrize("preset", PAPERS)
def test_every_paper_preset_evaluates_on_its_papers_prompts_not_the_demos(preset):
    cfg = compose([f"experiment={preset}"])
    assert cfg.data.name != "demo", f"experiment={preset} trains and evaluates on the demo's colour prompts"
    assert "demo" not in held_out_source(cfg)


def test_the_paper_presets_evaluate_as_their_papers():
    """The cadence and held-out prompts each preset cites (conf/experiment/*.yaml)."""
    expected = {
        "flash_grpo_wan": (20, "300 prompts of data=file held out", 1),  # Flash-GRPO config/dgx.py eval_freq 20
        "flash_grpo_flux": (20, "300 prompts of data=file held out", 1),
        "jagg_paper": (50, "the test split of data=hpdv2", 1),  # DanceGRPO's HPD prompts, the HPSv2 benchmark
        "awm_sd35m": (50, "the test split of data=pickscore", 1),  # AWM's eval_freq 50 on Flow-GRPO's PickScore split
        "nft_sd35m": (50, "the test split of data=pickscore", 1),
    }
    for preset, want in expected.items():
        cfg = compose([f"experiment={preset}"])
        assert (cfg.eval.every, held_out_source(cfg), cfg.eval.samples_per_prompt) == want, preset
