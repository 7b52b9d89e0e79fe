"""Run identity (issue 25 item 1, docs/resume.md#run-identity): a run dir or checkpoint of another run is refused,
naming the differing keys, before anything is read, moved or built; the keys that may change on resume do not count;
a sweep re-run with its overrides in another order is refused before any point runs."""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import ROOT, compose, rewardflow_cmd
from launcher.checkpoint import run_identity
from launcher.train.trainer import RunInfo, Trainer
from launcher.validate import validate
from rewardflow.errors import ConfigError

RUN = ["experiment=smoke", "logger=none", "trainer.steps=2", "trainer.ckpt_every=1", "trainer.export=false"]


def test_identity_leaves_out_exactly_the_keys_that_may_change_on_resume():
    base = run_identity.identity(compose(RUN))
    same = run_identity.identity(
        compose([*RUN, "trainer.steps=50", "method.update_batch=2", "trainer.threads=1", "eval.every=3"])
    )
    assert same == base
    assert not any(run_identity._under(k, run_identity.MAY_CHANGE_ON_RESUME) for k in base)
    assert {"method.name", "model.finetune", "optimizer.lr", "trainer.seed", "reward.name"} <= set(base)


def test_the_prompts_held_out_of_training_are_part_of_the_identity(tmp_path):
    """eval may change on resume, except how many prompts it holds out of training: another eval.split, or turning
    data=file's evaluation (and with it its default split) on or off, changes the training prompts."""
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("".join(f"a red thing {i}\n" for i in range(40)))
    file_run = [*RUN, "data=file", f"data.path={prompts}", "eval.every=5"]
    key = run_identity.HELD_OUT
    default = run_identity.identity(compose(file_run))
    assert default[key] == 32  # data=file evaluates by default, holding out eval.default_split
    assert run_identity.identity(compose([*file_run, "eval.every=7"])) == default  # the cadence is free
    off, other = (run_identity.identity(compose([*file_run, o])) for o in ("eval.every=0", "eval.split=8"))
    assert run_identity.differences(default, off) == [f"{key}: 32 (checkpoint) vs 0 (this run)"]
    assert run_identity.differences(default, other) == [f"{key}: 32 (checkpoint) vs 8 (this run)"]
    assert run_identity.differences({k: v for k, v in default.items() if k != key}, off) == []  # older checkpoints


def test_differences_name_a_changed_group_once_and_each_other_key():
    a = run_identity.identity(compose(RUN))
    b = run_identity.identity(compose([*RUN, "method=flow_grpo_fast", "optimizer.lr=1e-4"]))
    lines = run_identity.differences(a, b)
    assert lines[0] == "method: dance_grpo (checkpoint) vs flow_grpo_fast (this run)"
    assert not any(line.startswith("method.") for line in lines)  # the group's own keys follow from its option
    assert any(line.startswith("optimizer.lr: 0.003") for line in lines)
    # a key one side lacks (added or removed by an upgrade, at its default) is not a difference
    assert run_identity.differences({**a, "model.new_key": 1}, a) == []
    assert run_identity.differences(a, b, run_identity.RESUME_FROM_MUST_MATCH) == [lines[0]]


def test_a_run_dir_that_stopped_before_its_first_checkpoint_is_still_owned(tmp_path):
    run_identity.write(tmp_path, compose(RUN), ["method=dance_grpo"])
    run_identity.check_own_run(compose([*RUN, "trainer.steps=9"]), tmp_path)
    with pytest.raises(ConfigError, match=r"trainer.seed: 0 \(checkpoint\) vs 1 \(this run\)") as err:
        run_identity.check_own_run(compose([*RUN, "trainer.seed=1"]), tmp_path)
    assert "method=dance_grpo" in str(err.value) and "Fix" in str(err.value)
    run_identity.check_own_run(compose([*RUN, "trainer.seed=1", "trainer.resume=false"]), tmp_path)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished 2-step run (full fine-tuning) with checkpoints after steps 0 and 1."""
    run_dir = tmp_path_factory.mktemp("finished")
    Trainer(compose(RUN), RunInfo(run_dir=run_dir, overrides=["experiment=smoke"])).fit()
    return run_dir


def _listing(run_dir):
    return sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.name != "rewardflow.lock")


@pytest.mark.parametrize(
    "changed,named",
    [
        (["method=flow_grpo_fast"], "method: dance_grpo (checkpoint) vs flow_grpo_fast (this run)"),
        (["model.finetune=lora"], "model.finetune: 'full' (checkpoint) vs 'lora' (this run)"),
    ],
)
def test_a_restart_with_another_config_is_refused_and_touches_nothing(finished, changed, named, no_model_building):
    before = _listing(finished)
    meta = json.loads((finished / "checkpoints" / "step_00000001" / "meta.json").read_text())
    assert meta["overrides"] == ["experiment=smoke"] and meta["identity"]["method.name"] == "dance_grpo"
    with pytest.raises(ConfigError) as err:
        Trainer(compose([*RUN, *changed]), RunInfo(run_dir=finished))
    assert named in str(err.value) and "experiment=smoke" in str(err.value) and "Fix" in str(err.value)
    assert _listing(finished) == before  # no checkpoint set aside as damaged, no metrics replaced


def test_a_longer_run_resumes_in_its_own_dir(finished):
    trainer = Trainer(compose([*RUN, "trainer.steps=3", "method.update_batch=2"]), RunInfo(run_dir=finished))
    assert trainer.start_step == 2
    trainer.run_lock.release()


@pytest.mark.parametrize("changed", ["method=flow_grpo_fast", "model.finetune=lora"])
def test_resume_from_another_method_or_model_is_refused_before_any_model_is_built(finished, changed):
    with pytest.raises(ConfigError) as err:
        validate(compose([*RUN, changed, f"trainer.resume_from={finished}"]))
    key = changed.split("=")[0]
    assert f"trainer.resume_from={finished}" in str(err.value) and f"{key.split('.')[0]}" in str(err.value)
    # another learning rate, reward or seed is what resume_from is for
    validate(compose([*RUN, "optimizer.lr=1e-4", "trainer.seed=3", f"trainer.resume_from={finished}"]))


def _sweep(sweep_dir, *points: str) -> subprocess.CompletedProcess:
    cmd = [*rewardflow_cmd(), "-m", *RUN, "trainer.steps=1", *points, f"hydra.sweep.dir={sweep_dir}"]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_a_sweep_rerun_with_reordered_overrides_is_refused_before_any_point_runs(tmp_path):
    first = _sweep(tmp_path, "method=dance_grpo,flow_grpo_fast", "trainer.seed=0,1")
    assert first.returncode == 0, first.stderr[-3000:]
    before = {n: (tmp_path / str(n) / "metrics.jsonl").read_text() for n in range(4)}
    again = _sweep(tmp_path, "trainer.seed=0,1", "method=dance_grpo,flow_grpo_fast", "trainer.steps=3")
    assert again.returncode == 2, again.stderr[-3000:]
    assert "none was started" in again.stderr and "Traceback" not in again.stderr
    # points 1 and 2 swapped places: (dance_grpo, seed 1) <-> (flow_grpo_fast, seed 0)
    assert "point 1 " in again.stderr and "point 2 " in again.stderr and "point 0 " not in again.stderr
    assert "method: dance_grpo (checkpoint) vs flow_grpo_fast (this run)" in again.stderr
    assert {n: (tmp_path / str(n) / "metrics.jsonl").read_text() for n in range(4)} == before


def test_resume_from_an_ema_saved_without_warmup_into_a_warmup_run_is_refused_naming_the_key(tmp_path):
    """The warmup's update count is saved only with ``trainer.ema_warmup`` (launcher/train/ema.py): resuming from an
    EMA of the other layout is a message naming the key before anything is built, not a checkpoint misfit."""
    ema = [*RUN, "trainer.steps=1", "trainer.ema_decay=0.9"]
    Trainer(compose(ema), RunInfo(run_dir=tmp_path / "a")).fit()
    with pytest.raises(ConfigError, match=r"trainer.ema_warmup=false to continue it") as err:
        validate(compose([*ema, "trainer.ema_warmup=true", f"trainer.resume_from={tmp_path / 'a'}"]))
    assert "trainer.ema_decay=0 trainer.ema_warmup=false" in str(err.value)
    validate(compose([*ema, f"trainer.resume_from={tmp_path / 'a'}"]))  # the same layout resumes
    validate(compose([*RUN, f"trainer.resume_from={tmp_path / 'a'}"]))  # no EMA in this run: nothing to continue
