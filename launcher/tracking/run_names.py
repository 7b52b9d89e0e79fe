"""A run's names on the dashboard: its W&B group, display name, tags and job type, with W&B's own environment
variables honoured the way W&B documents them (docs/wandb.md#project-entity-group-names).

Precedence, for each: a value set in rewardflow's config (``logger.group``, ``logger.run_name``, ``logger.tags``)
first, because it was typed for this run; then W&B's variables (``WANDB_RUN_GROUP``, ``WANDB_NAME``, ``WANDB_TAGS``,
``WANDB_JOB_TYPE``), because a user or a W&B sweep agent set them for this process; then rewardflow's defaults. The
default group is the sweep's (``sweep-<date>_<time>``) for the points of one sweep and none for a single run: a group
is what W&B averages over, so unrelated single runs of one method must not share one as if they were its seeds.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

#: W&B's job type of a training run (rewardflow-compare logs "compare")
TRAIN_JOB_TYPE = "train"
#: W&B's job type of a ``rewardflow-eval`` run, which scores weights without training (launcher/evaluate_cli.py)
EVAL_JOB_TYPE = "eval"


@dataclass
class DashboardNames:
    group: str | None
    name: str | None
    tags: list[str] = field(default_factory=list)
    job_type: str = TRAIN_JOB_TYPE


def readable_name(overrides: Sequence[str]) -> str | None:
    """``jagg seed=0 lr=0.0003`` from the overrides ``method=jagg trainer.seed=0 optimizer.lr=0.0003``: a config
    group's choice by its option, a key by its last part (the whole key where two overrides share a last part), so that
    a run list reads like the sweep that made it; None without overrides (W&B then draws a name)."""
    items = [o.lstrip("+~") for o in overrides if not o.lstrip("+~").startswith(("hydra.", "logger."))]
    pairs = [tuple(o.split("=", 1)) if "=" in o else (o, "") for o in items]
    last = [k.rsplit(".", 1)[-1].split("@")[0] for k, _ in pairs]
    parts = []
    for (key, value), short in zip(pairs, last):
        if "." not in key and "@" not in key and value:
            parts.append(value)  # a group's choice: method=jagg -> jagg
        else:
            parts.append(f"{short if last.count(short) == 1 else key}={value}")
    return " ".join(parts) or None


def dashboard_names(
    logger_cfg: Any,
    defaults: Sequence[str],
    sweep_group: str | None,
    run_name: str | None,
    env: Mapping[str, str] | None = None,
    job_type: str = TRAIN_JOB_TYPE,
) -> DashboardNames:
    """The names of one run: ``logger_cfg`` is ``cfg.logger``, ``defaults`` the default tags (method, model, reward,
    ``sweep``), ``sweep_group`` the sweep's group (None for a single run), ``run_name`` the readable default name."""
    env = os.environ if env is None else env
    env_tags = [t.strip() for t in env.get("WANDB_TAGS", "").split(",") if t.strip()]
    return DashboardNames(
        group=logger_cfg.get("group") or env.get("WANDB_RUN_GROUP") or sweep_group,
        name=logger_cfg.get("run_name") or env.get("WANDB_NAME") or run_name,
        tags=list(dict.fromkeys([*env_tags, *defaults, *logger_cfg.get("tags", [])])),
        job_type=env.get("WANDB_JOB_TYPE") or job_type,
    )
