"""Checks of the composed config that run before any model is built, all at once.

Types, unknown keys and unknown modes are already rejected at composition (the typed configs). Here every component
of the run (method, model, reward, data, logger) checks the values it cannot run with through the hook
``@classmethod check(cls, cfg, errors)`` of its typed config class (``MethodConfig.check`` and its subclasses, ...),
which sees the whole run config (typed) and records failures in ``errors`` (:class:`rewardflow.errors.ConfigErrors`,
one ``errors.require(ok, key, message)`` per rule); the trainer's own keys and the rules across groups are checked
here, and ``eval.*`` by ``EvalConfig.check``. The user then gets one :class:`ConfigError` listing every failure, each naming its key and the fix.

:func:`check_config` (the config classes' hooks included) imports no torch: the CLI runs it (:func:`precheck`)
before Hydra creates the run folder, so ``trainer.steps=0`` or ``method.clip_range=-1`` is reported in about a
second. The checks that need a component's code (the component classes' ``check_with_code``: a model's
checkpoint folder and compile support, a reward's architecture), the evaluation's prompts and rewards,
``trainer.resume_from`` and the devices run in the trainer (docs/configuration.md#validation).
"""

from __future__ import annotations

import logging
import math
from typing import Any

from omegaconf import DictConfig, OmegaConf

from launcher.cluster.cluster_defaults import check_cluster_resources
from launcher.cluster.device_check import check_devices
from launcher.cluster.env_check import check_environment
from launcher.cluster.mesh import check_mesh_config, planned_world
from launcher.components import component_class
from launcher.strict_keys import check_keys
from launcher.toy_values import toy_values
from launcher.tracking.objective import KEY as OBJECTIVE_KEY
from launcher.tracking.objective import name_problem
from launcher.train.trainer_config import LRSchedule
from rewardflow.errors import ConfigErrors
from rewardflow.prompts import data_prompts, held_out_count, held_out_key

log = logging.getLogger(__name__)

#: the config groups of a component (``logger=none`` has none), whose config class may have a ``check`` hook
COMPONENT_GROUPS = ("method", "model", "reward", "data", "logger")


def check_config(cfg: DictConfig, errors: ConfigErrors) -> Any:
    """The checks that need no component's code (nor torch): missing and unknown keys (raised at once, as the rest
    needs a valid tree), then the trainer's, optimizer's, protocol's and cluster's own keys and the environment,
    recorded in ``errors``. Returns the typed config (``OmegaConf.to_object``)."""
    for key in OmegaConf.missing_keys(cfg):
        errors.require(False, key, f"is required and not set (??? in the composed config). Fix: {key}=<value>")
    check_keys(cfg, errors)
    errors.raise_if_any()
    run: Any = OmegaConf.to_object(cfg)  # launcher.config.TrainConfig with the components' dataclasses
    check_trainer(run, errors)
    evaluate = getattr(run, "evaluate", None)  # rewardflow-eval's config (launcher/evaluate_config.py)
    if evaluate is not None:
        if run.eval.prompts is not None or held_out_count(run.eval) > 0:  # none: EvaluateConfig.check says so
            run.eval.every = max(int(run.eval.every), 1)  # it evaluates whatever eval.every says: check as evaluating
        type(evaluate).check(run, errors)
    type(run.eval).check(run, errors)
    check_environment(run, errors)
    check_components(run, errors)
    return run


def check_components(run: Any, errors: ConfigErrors) -> None:
    """Each group's own rules: the hook ``@classmethod check(cls, cfg, errors)`` of its typed config class
    (``MethodConfig`` and its subclasses, ...), which sees the whole run config and imports no torch. The config
    class is the node's own type (``OmegaConf.to_object`` built it from the group's schema), so no component code is
    imported here (docs/configuration.md#validation)."""
    for group in COMPONENT_GROUPS:
        hook = getattr(type(getattr(run, group)), "check", None)
        if callable(hook):
            hook(run, errors)


def precheck(cfg: DictConfig) -> None:
    """Raise one :class:`ConfigError` listing what :func:`check_config` finds. The CLI runs it before Hydra creates
    the run folder (launcher/run_check.py): this module imports no torch at module level, so these errors come in
    about a second (docs/configuration.md#validation)."""
    errors = ConfigErrors()
    check_config(cfg, errors)
    errors.raise_if_any()


def validate(cfg: DictConfig, on_this_host: bool = True) -> list[str]:
    """Raise one :class:`ConfigError` listing everything the config cannot run with; return the prompts the run
    trains on (without the prompts held out for evaluation: ``eval.split``, or data=file's ``eval.default_split``).

    ``on_this_host=False`` (a SLURM sweep checked on its submit host) leaves out the checks of this machine's devices,
    which the job repeats on its node."""
    # these import torch: inside the function, so that precheck() stays free of it
    from launcher.checkpoint.resume import check_resume_from
    from launcher.train.data import split_prompts
    from launcher.train.evaluation import Evaluator

    errors = ConfigErrors()
    run = check_config(cfg, errors)
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
    for cls in classes.values():  # the few checks that need a component's code or files (check_with_code)
        hook = getattr(cls, "check_with_code", None)
        if callable(hook):
            hook(run, errors)
    if not errors.messages:  # rules across groups need each group to be valid
        check_across_groups(run, classes, errors)
    Evaluator.check(run, errors)
    errors.raise_if_any()
    for warning in toy_values(run):
        log.warning(warning)
    return split_prompts(data_prompts(run.data), held_out_count(run.eval), held_out_key(run.eval))[0]


#: trainer.seed must be below this (torch seeds are 64-bit; any seed in range works: docs/configuration.md)
SEED_LIMIT = 2**63


def check_trainer(cfg: Any, errors: ConfigErrors) -> None:
    t = cfg.trainer
    errors.require(t.steps >= 1, "trainer.steps", f"must be >= 1 (got {t.steps})")
    errors.require(
        0 <= t.seed < SEED_LIMIT,
        "trainer.seed",
        f"must be in 0 <= seed < 2**63 = {SEED_LIMIT} (got {t.seed}). Fix: e.g. trainer.seed=0",
    )
    errors.require(
        t.threads >= 0,
        "trainer.threads",
        f"must be >= 0 (got {t.threads}); 0 = auto (SLURM's cpus-per-task, else the cores split over the local "
        f"processes). Fix: trainer.threads=0, or the number of torch threads per process",
    )
    if errors.require(
        t.num_sample_images >= 0,
        "trainer.num_sample_images",
        f"must be >= 0 (got {t.num_sample_images}). Fix: trainer.num_sample_images=8",
    ):
        errors.require(
            t.sample_every == 0 or t.num_sample_images >= 1,
            "trainer.num_sample_images",
            f"must be >= 1 while trainer.sample_every={t.sample_every} draws image grids (got "
            f"{t.num_sample_images}). Fix: trainer.num_sample_images=8, or trainer.sample_every=0 to draw no grids",
        )
    errors.require(
        t.ckpt_every >= 0,
        "trainer.ckpt_every",
        f"must be >= 0 (got {t.ckpt_every}); 0 = checkpoint only at the end and on preemption. Fix: "
        f"trainer.ckpt_every=50 (a checkpoint every 50 steps), or trainer.ckpt_every=0",
    )
    errors.require(
        t.keep_last_ckpts >= 1,
        "trainer.keep_last_ckpts",
        f"must be >= 1 (got {t.keep_last_ckpts}): the newest checkpoint is what a resume starts from. Fix: "
        f"trainer.keep_last_ckpts=2",
    )
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
        math.isfinite(cfg.optimizer.lr_scale) and cfg.optimizer.lr_scale > 0,
        "optimizer.lr_scale",
        f"must be a finite number > 0 (got {cfg.optimizer.lr_scale}); the rate used is optimizer.lr x "
        f"optimizer.lr_scale. Fix: e.g. optimizer.lr_scale=1",
    )
    errors.require(
        t.log_every >= 0, "trainer.log_every", f"must be >= 0 (got {t.log_every}); 0 disables the per-step log line"
    )
    problem = name_problem(str(t.objective))
    errors.require(problem is None, OBJECTIVE_KEY, problem or "")
    check_optimizer(cfg.optimizer, errors)
    for key in ("target", "margin"):
        value = getattr(cfg.protocol, key)
        errors.require(
            value is None or math.isfinite(value),
            f"protocol.{key}",
            f"must be a finite number or null (got {value})",
        )
    margin = cfg.protocol.margin
    errors.require(margin is None or not margin < 0, "protocol.margin", f"must be >= 0 (got {margin})")
    check_lr_schedule(cfg, errors)
    check_ema(cfg, errors)
    with errors.collect():
        check_mesh_config(cfg.cluster)
    check_cluster_resources(cfg.cluster, errors)
    check_ranks(cfg, errors)


def check_optimizer(o: Any, errors: ConfigErrors) -> None:
    """The AdamW-style keys every optimizer is built with (``optimizer._target_`` gets them all)."""
    betas = list(o.betas)
    errors.require(
        len(betas) == 2 and all(math.isfinite(b) and 0 <= b < 1 for b in betas),
        "optimizer.betas",
        f"must be two numbers, each in [0, 1) (got {betas}). Fix: optimizer.betas=[0.9,0.999]",
    )
    errors.require(
        math.isfinite(o.eps) and o.eps > 0,
        "optimizer.eps",
        f"must be a finite number > 0 (got {o.eps}). Fix: optimizer.eps=1e-8",
    )
    errors.require(
        math.isfinite(o.weight_decay) and o.weight_decay >= 0,
        "optimizer.weight_decay",
        f"must be a finite number >= 0 (got {o.weight_decay}); 0 = no weight decay. Fix: optimizer.weight_decay=1e-4",
    )


def check_lr_schedule(cfg: Any, errors: ConfigErrors) -> None:
    """``optimizer.scheduler`` and ``optimizer.warmup_steps`` (the schedules: launcher/train/lr_schedule.py)."""
    o, steps = cfg.optimizer, int(cfg.trainer.steps)
    name, warmup = LRSchedule(o.scheduler), int(o.warmup_steps)
    errors.require(
        name != LRSchedule.constant or not warmup,
        "optimizer.warmup_steps",
        f"{warmup} has no effect with optimizer.scheduler=constant. Fix: optimizer.scheduler="
        f"warmup_constant (or warmup_cosine), or optimizer.warmup_steps=0",
    )
    errors.require(
        name == LRSchedule.constant or warmup >= 1,
        "optimizer.warmup_steps",
        f"optimizer.scheduler={name} needs optimizer.warmup_steps >= 1 (got {warmup})",
    )
    errors.require(
        name != LRSchedule.warmup_cosine or warmup < steps,
        "optimizer.warmup_steps",
        f"{warmup} leaves no step for the cosine of trainer.steps={steps}. Fix: optimizer.warmup_steps < trainer.steps",
    )


def check_ema(cfg: Any, errors: ConfigErrors) -> None:
    """The EMA's keys (``trainer.ema_*``, ``trainer.export_ema``; the EMA: launcher/train/ema.py)."""
    t = cfg.trainer
    errors.require(
        0.0 <= t.ema_decay < 1.0,
        "trainer.ema_decay",
        f"must be in [0, 1) (got {t.ema_decay}); 0 turns the EMA off, DanceGRPO uses 0.995",
    )
    errors.require(
        not t.export_ema or t.ema_decay > 0,
        "trainer.export_ema",
        "true needs an EMA of the weights. Fix: trainer.ema_decay=0.995 (for example), or trainer.export_ema=false",
    )
    errors.require(
        not t.ema_warmup or t.ema_decay > 0,
        "trainer.ema_warmup",
        "true needs an EMA of the weights. Fix: trainer.ema_decay=0.9 (for example), or trainer.ema_warmup=false",
    )


def check_ranks(cfg: Any, errors: ConfigErrors) -> None:
    """A cluster's rank counts, and the prompts of a step against them, before any rank is started (the trainer
    checks the same once the process group exists)."""
    c = cfg.cluster
    parallel = getattr(c, "parallel", 1)
    errors.require(
        isinstance(parallel, int) and parallel >= 1,
        "cluster.parallel",
        f"must be >= 1 (got {parallel}): the points of a cluster=local sweep run this many at a time. Fix: "
        f"cluster.parallel=1 (one after the other), or up to the machine's cores",
    )
    if getattr(c, "tasks_per_node", None) is None:  # cluster=local: one process
        return
    ok = errors.require(
        c.tasks_per_node >= 1,
        "cluster.tasks_per_node",
        f"must be >= 1 (got {c.tasks_per_node}). Fix: cluster.tasks_per_node=<processes per node>",
    )
    nodes = getattr(c, "nodes", 1)
    ok = errors.require(nodes >= 1, "cluster.nodes", f"must be >= 1 (got {nodes}). Fix: cluster.nodes=1") and ok
    cpus = getattr(c, "cpus_per_task", None)
    errors.require(
        cpus is None or cpus >= 1,
        "cluster.cpus_per_task",
        f"must be >= 1 or null (got {cpus}). Fix: drop the override (cluster=slurm: min(8, 64 // tasks_per_node)), "
        f"cluster.cpus_per_task=null (the site's default), or a count of CPUs",
    )
    world = planned_world(c)
    prompts = getattr(cfg.method, "prompts_per_step", None)
    if not ok or world is None or not isinstance(prompts, int) or prompts < 1:
        return
    ranks, per_node = world
    nodes = ranks // per_node
    on = f"cluster.tasks_per_node={per_node}" + (f" x cluster.nodes={nodes}" if nodes > 1 else "")
    fix = f"method.prompts_per_step={max(ranks, round(prompts / ranks) * ranks)} (a multiple of {ranks})"
    fewer = [d for d in range(1, per_node + 1) if prompts % (d * nodes) == 0]
    if fewer:
        fix += f", or cluster.tasks_per_node={max(fewer)}"
    errors.require(
        prompts % ranks == 0,
        "method.prompts_per_step",
        f"must be divisible by the {ranks} ranks of cluster={c.name} ({on}; each rank samples whole prompt "
        f"groups), got {prompts}. Fix: {fix}",
    )
    updates, group = getattr(cfg.method, "updates_per_rollout", 1), getattr(cfg.method, "group_size", 1)
    if prompts % ranks == 0 and isinstance(updates, int) and isinstance(group, int) and updates >= 1 and ranks > 1:
        mine = prompts // ranks * group  # each rank splits its own samples into the updates (Method.update_plan)
        errors.require(
            mine % updates == 0,
            "method.updates_per_rollout",
            f"must divide each rank's {mine} samples ({prompts} prompts x {group} samples over the {ranks} ranks of "
            f"cluster={c.name}); got {updates}. Fix: method.updates_per_rollout="
            f"{max(d for d in range(1, mine + 1) if mine % d == 0 and d <= updates)}, or more prompts per step",
        )


def check_across_groups(cfg: Any, classes: dict[str, type[Any]], errors: ConfigErrors) -> None:
    method, reward = classes["method"], classes["reward"]
    errors.require(
        not method.requires_differentiable_reward or reward.is_differentiable(cfg.reward),
        "reward",
        f"method={cfg.method.name} needs a differentiable reward, but reward={cfg.reward.name} is not. "
        f"Fix: choose a differentiable reward (e.g. reward=color)",
    )
