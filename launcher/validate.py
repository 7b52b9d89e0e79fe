"""Checks of the composed config that run before any model is built, all at once.

Types, unknown keys and unknown modes are already rejected at composition (the typed configs). Here every component
of the run (method, model, reward, data, logger) checks the values it cannot run with through its hook
``@classmethod check(cls, cfg, errors)``, which sees the whole run config (typed) and records failures in ``errors``
(:class:`rewardflow.errors.ConfigErrors`, one ``errors.require(ok, key, message)`` per rule); the trainer's own keys
and the rules across groups are checked here. The user then gets one :class:`ConfigError` listing every failure,
each naming its key and the fix.
"""

from __future__ import annotations

import math
from typing import Any

from omegaconf import DictConfig, OmegaConf

from launcher.checkpoint.resume import check_resume_from
from launcher.cluster.device_check import check_devices
from launcher.cluster.mesh import check_mesh_config
from launcher.components import component_class
from launcher.strict_keys import check_keys
from launcher.train import lr_schedule
from launcher.train.data import split_prompts
from launcher.train.ema import ParameterEMA
from launcher.train.evaluation import Evaluator
from rewardflow.errors import ConfigErrors
from rewardflow.prompts import load_prompts

#: the config groups whose component has a ``check`` hook (``logger=none`` has no component)
COMPONENT_GROUPS = ("method", "model", "reward", "data", "logger")


def validate(cfg: DictConfig, on_this_host: bool = True) -> list[str]:
    """Raise one :class:`ConfigError` listing everything the config cannot run with; return the prompts the run
    trains on (without the ``eval.split`` held out for evaluation).

    ``on_this_host=False`` (a SLURM sweep checked on its submit host) leaves out the checks of this machine's devices,
    which the job repeats on its node."""
    errors = ConfigErrors()
    for key in OmegaConf.missing_keys(cfg):
        errors.require(False, key, f"is required and not set (??? in the composed config). Fix: {key}=<value>")
    check_keys(cfg, errors)
    errors.raise_if_any()
    run: Any = OmegaConf.to_object(cfg)  # launcher.config.TrainConfig with the components' dataclasses
    check_trainer(run, errors)
    with errors.collect():
        check_resume_from(cfg)  # the DictConfig: the run identity is read from it
    if on_this_host:
        check_devices(run, errors)
    classes: dict[str, type[Any]] = {}
    for group in COMPONENT_GROUPS:
        node = getattr(run, group)
        if getattr(node, "_target_", None) is not None:
            with errors.collect():
                classes[group] = component_class(node, group)
    for cls in classes.values():
        cls.check(run, errors)
    if not errors.messages:  # rules across groups need each group to be valid
        check_across_groups(run, classes, errors)
    Evaluator.check(run, errors)
    errors.raise_if_any()
    return split_prompts(
        load_prompts(run.data.prompts, run.data.path, run.data.field, run.data.encoding), run.eval.split
    )[0]


def check_trainer(cfg: Any, errors: ConfigErrors) -> None:
    t = cfg.trainer
    errors.require(t.steps >= 1, "trainer.steps", f"must be >= 1 (got {t.steps})")
    errors.require(
        t.max_grad_norm >= 0, "trainer.max_grad_norm", f"must be >= 0 (got {t.max_grad_norm}); 0 disables clipping"
    )
    errors.require(
        t.max_nonfinite_in_a_row >= 1,
        "trainer.max_nonfinite_in_a_row",
        f"must be >= 1 (got {t.max_nonfinite_in_a_row})",
    )
    errors.require(
        math.isfinite(t.max_weight_growth) and t.max_weight_growth >= 0,
        "trainer.max_weight_growth",
        f"must be a finite number >= 0 (got {t.max_weight_growth}); 0 disables the exploded-weights check",
    )
    errors.require(
        t.sample_every >= 0, "trainer.sample_every", f"must be >= 0 (got {t.sample_every}); 0 disables image grids"
    )
    errors.require(
        math.isfinite(cfg.optimizer.lr) and cfg.optimizer.lr > 0,
        "optimizer.lr",
        f"must be a finite number > 0 (got {cfg.optimizer.lr}). Fix: e.g. optimizer.lr=1e-5",
    )
    errors.require(
        t.log_every >= 0, "trainer.log_every", f"must be >= 0 (got {t.log_every}); 0 disables the per-step log line"
    )
    lr_schedule.check(cfg, errors)
    ParameterEMA.check(cfg, errors)
    with errors.collect():
        check_mesh_config(cfg.cluster)


def check_across_groups(cfg: Any, classes: dict[str, type[Any]], errors: ConfigErrors) -> None:
    method, reward = classes["method"], classes["reward"]
    errors.require(
        not method.requires_differentiable_reward or reward.is_differentiable(cfg.reward),
        "reward",
        f"method={cfg.method.name} needs a differentiable reward, but reward={cfg.reward.name} is not. "
        f"Fix: choose a differentiable reward (e.g. reward=color)",
    )
