"""Tuning (issue 29 item 3; docs/tuning.md): the value a run returns to a sweeper is ``trainer.objective`` (default:
the final held-out evaluation's score), a sweeper that optimises it (``hydra/sweeper=optuna``) has its search space,
its objective and its direction checked before the first trial, and a 4-trial Optuna study on the demo reports the
objective every trial logged."""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from conftest import ROOT, rewardflow_cmd
from launcher.config import compose
from launcher.tracking.objective import objective_problem, objective_value
from launcher.validate import precheck
from rewardflow.errors import ConfigError

SMOKE = ["experiment=smoke", "logger=none", "trainer.export=false", "trainer.threads=1"]
#: the demo's held-out evaluation, small: 2 prompts, 2 samples each (the default diversity score compares them),
#: before and after the one step
SMALL_EVAL = ["eval.every=1", "eval.samples_per_prompt=2", "eval.prompts=[a red car,a blue circle]"]


def cli(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_SILENT": "true"}
    return subprocess.run(
        [*rewardflow_cmd(), *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env
    )


# ------------------------------------------------------------------------------------------------ the objective
def test_the_objective_is_the_metrics_last_logged_value_and_nan_when_it_never_was():
    rows = [
        {"step": 0, "eval/color/mean": 0.5},
        {"step": 0, "reward/mean": 0.25},
        {"step": 1, "reward/mean": None},  # a non-finite reward is logged as null
        {"step": 2, "eval/color/mean": 0.75},
    ]
    assert objective_value(rows, "eval/color/mean") == 0.75  # the final evaluation's, not the first
    assert math.isnan(objective_value(rows, "reward/mean"))
    assert math.isnan(objective_value(rows, "eval/clip/mean"))


def test_the_default_objective_is_the_final_held_out_score_of_the_trained_reward():
    cfg = compose([])
    assert cfg.trainer.objective == "eval/color/mean" and cfg.trainer.objective_direction == "maximize"
    assert objective_problem(cfg) is None  # the demo evaluates held-out prompts


def test_an_objective_no_run_would_log_is_a_config_error_naming_the_key_and_the_fix():
    problem = objective_problem(compose(["experiment=smoke"]))  # eval.every=0
    assert problem is not None
    for part in (
        "trainer.objective=eval/color/mean",
        "eval.every=0",
        "Fix: eval.every=N",
        "trainer.objective=reward/mean",
    ):
        assert part in problem
    problem = objective_problem(compose(["trainer.objective=val/color/mean"]))
    assert problem is not None and "eval.val_split=N" in problem
    problem = objective_problem(compose(["trainer.objective=eval/clip/mean"]))
    assert problem is not None and "eval/color/mean" in problem and "+reward@eval.rewards" in problem
    assert objective_problem(compose(["trainer.objective=reward/mean", "experiment=smoke"])) is None


def test_an_objective_that_is_no_metric_name_fails_any_run():
    with pytest.raises(ConfigError, match=r"trainer.objective: 'rewad/mean' is not a metric rewardflow logs"):
        precheck(compose(["trainer.objective=rewad/mean"]))
    with pytest.raises(ConfigCompositionException, match="trainer.objective_direction=up"):
        compose(["trainer.objective_direction=up"])  # a mode: fails at composition, with its valid values


# ----------------------------------------------------------------------------------------- before the first trial
def test_a_bad_optuna_search_space_is_reported_before_any_trial(tmp_path):
    sweep = tmp_path / "sweep"
    proc = cli(
        "-m", "hydra/sweeper=optuna", *SMOKE, "trainer.objective=reward/mean",
        "optimizer.lr_scale=interval(-1,2)", "method.group_size=choice(2,1)", f"hydra.sweep.dir={sweep}",
    )  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert (
        "OptunaSweeper: 2 of the 4 points of the search space checked cannot run, so no trial was started"
        in proc.stderr
    )
    assert "optimizer.lr_scale=-1.0 method.group_size=2" in proc.stderr  # the interval's low end
    assert "optimizer.lr_scale: must be a finite number > 0" in proc.stderr
    assert "method.group_size: must be >= 2" in proc.stderr  # the choice's second value
    assert not sweep.exists()


def test_an_optuna_direction_against_the_objectives_and_an_unlogged_objective_are_reported(tmp_path):
    sweep = tmp_path / "sweep"
    proc = cli("-m", "hydra/sweeper=optuna", *SMOKE, "hydra.sweeper.direction=minimize", f"hydra.sweep.dir={sweep}")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "hydra.sweeper.direction=minimize contradicts trainer.objective_direction=maximize" in proc.stderr
    proc = cli("-m", "hydra/sweeper=optuna", *SMOKE, "optimizer.lr_scale=interval(0.5,2)", f"hydra.sweep.dir={sweep}")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "trainer.objective=eval/color/mean is an evaluation metric, and eval.every=0" in proc.stderr
    assert not sweep.exists()


# ---------------------------------------------------------------------------------------------------- a study
@pytest.mark.slow
def test_a_4_trial_optuna_study_on_the_demo_optimises_the_final_held_out_score(tmp_path):
    import optuna

    sweep, storage = tmp_path / "sweep", f"sqlite:///{tmp_path / 'study.db'}"
    proc = cli(
        "-m", "hydra/sweeper=optuna", "hydra.sweeper.n_trials=4", "hydra.sweeper.sampler.seed=0",
        f"hydra.sweeper.storage={storage}", "hydra.sweeper.study_name=demo",
        *SMOKE, "trainer.steps=1", *SMALL_EVAL, "optimizer.lr_scale=interval(0.5,2)", "cluster.parallel=2",
        f"hydra.sweep.dir={sweep}",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    assert "hydra.sweeper.direction=maximize (from trainer.objective_direction)" in proc.stdout + proc.stderr

    def final_eval(num: int) -> float:  # what trial `num` logged last for the objective
        rows = [json.loads(line) for line in (sweep / str(num) / "metrics.jsonl").read_text().splitlines()]
        evals = [r for r in rows if "eval/color/mean" in r]
        assert evals[-1]["step"] == 1  # the final evaluation, after the last step
        return evals[-1]["eval/color/mean"]

    study = optuna.load_study(study_name="demo", storage=storage)  # resumable: the study is in the storage
    assert [t.number for t in study.trials] == [0, 1, 2, 3]
    for trial in study.trials:
        assert trial.state == optuna.trial.TrialState.COMPLETE
        assert trial.value == pytest.approx(final_eval(trial.number), abs=0)
        overrides = OmegaConf.load(sweep / str(trial.number) / ".hydra" / "overrides.yaml")
        assert f"optimizer.lr_scale={trial.params['optimizer.lr_scale']}" in list(overrides)
    results = OmegaConf.load(sweep / "optimization_results.yaml")
    best = max(range(4), key=final_eval)
    assert results.best_value == final_eval(best)  # maximized: the best final held-out score of the 4
    assert results.best_params["optimizer.lr_scale"] == study.trials[best].params["optimizer.lr_scale"]
    assert Path(sweep / "local_jobs.json").is_file()  # the trials ran through cluster=local's sweep launcher
