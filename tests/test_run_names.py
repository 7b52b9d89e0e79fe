"""A run's W&B names (docs/wandb.md#project-entity-group-names): W&B's own variables win over rewardflow's defaults,
a single run shares no group with unrelated runs of its method, names read like the sweep that made them; and the
offline W&B files of a real run carry them."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from conftest import compose
from launcher.tracking.run_names import TRAIN_JOB_TYPE, dashboard_names, readable_name
from launcher.train.trainer import RunInfo, Trainer


@pytest.mark.parametrize(
    "overrides,name",
    [
        (["method=jagg", "trainer.seed=0", "optimizer.lr=3e-4"], "jagg seed=0 lr=3e-4"),
        (["method.lr=1", "optimizer.lr=2"], "method.lr=1 optimizer.lr=2"),  # one last part, two keys: whole keys
        (["+reward@eval.rewards.jpeg=jpeg", "logger.mode=offline", "hydra.run.dir=x"], "jpeg=jpeg"),
        ([], None),
    ],
)
def test_names_read_like_the_overrides(overrides, name):
    assert readable_name(overrides) == name


def logger_cfg(**kw):
    return OmegaConf.create({"group": None, "run_name": None, "tags": [], **kw})


def test_wandb_variables_win_over_defaults_and_the_config_over_both():
    env = {"WANDB_RUN_GROUP": "g", "WANDB_NAME": "n", "WANDB_TAGS": "a, b", "WANDB_JOB_TYPE": "probe"}
    names = dashboard_names(logger_cfg(), ["jagg", "tiny_flux"], "sweep-1", "jagg seed=0", env)
    assert (names.group, names.name, names.tags, names.job_type) == ("g", "n", ["a", "b", "jagg", "tiny_flux"], "probe")
    typed = dashboard_names(logger_cfg(group="mine", run_name="r", tags=["x"]), ["jagg"], "sweep-1", None, env)
    assert (typed.group, typed.name, typed.tags) == ("mine", "r", ["a", "b", "jagg", "x"])


def test_a_single_run_is_in_no_group_and_a_sweep_point_in_its_sweeps():
    single = dashboard_names(logger_cfg(), ["dance_grpo"], None, "dance_grpo", env={})
    assert single.group is None and single.job_type == TRAIN_JOB_TYPE  # not "dance_grpo": not every run of it
    point = dashboard_names(logger_cfg(), ["dance_grpo", "sweep"], "sweep-2026-12-05_01-00-00", None, env={})
    assert point.group == "sweep-2026-12-05_01-00-00"


def test_a_runs_offline_wandb_files_carry_the_wandb_variables(tmp_path, monkeypatch):
    from launcher.tracking.wandb_offline import find_offline_runs, read_offline_run

    monkeypatch.setenv("WANDB_RUN_GROUP", "g")
    monkeypatch.setenv("WANDB_NAME", "n")
    monkeypatch.setenv("WANDB_TAGS", "a,b")
    cfg = compose(["experiment=smoke", "trainer.steps=1", "trainer.export=false", "logger=wandb"])
    cfg.logger.mode = "offline"
    Trainer(cfg, RunInfo(run_dir=tmp_path, run_name="smoke seed=0")).fit()
    (folder,) = find_offline_runs(tmp_path)
    run = read_offline_run(folder)
    assert (run.group, run.name) == ("g", "n") and {"a", "b", "dance_grpo"} <= set(run.tags), run.tags
