"""Typed schemas of every config group, registered in Hydra's ConfigStore.

Each YAML option under ``conf/<group>/`` starts from one of these schemas (``defaults: - /schema/<group>/<name>``),
so a misspelt key or a value of the wrong type fails at composition time, before anything is built. Value checks
that need more than a type (ranges, cross-group rules) live in :mod:`launcher.validate`.

Group schemas live in :mod:`launcher.schemas`, one module per component family; every module there that defines
``SCHEMAS = {group: {name: dataclass}}`` is registered as ``schema/<group>/<name>`` (so adding a method, model or
reward never edits a shared registry). Only light imports are allowed there: the CLI loads them at start-up.
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING


@dataclass
class TrainerConfig:
    steps: int = 60                   # rollout/update iterations
    seed: int = 0
    max_grad_norm: float = 1.0        # 0 disables clipping
    sample_every: int = 10            # image grid every N steps (W&B and PNG); 0 disables
    num_sample_images: int = 8
    max_nonfinite_in_a_row: int = 3   # abort after this many consecutive skipped (NaN/Inf) updates
    threads: int = 0                  # torch CPU threads per process; 0 = cores (or SLURM cpus) / local processes
    progress: bool = True             # progress bar with reward and s/step
    ckpt_every: int = 50              # DCP checkpoint every N steps (0: only on preemption / at the end)
    async_checkpoint: bool = False    # write checkpoints in the background (docs/performance.md)
    keep_last_ckpts: int = 2          # complete checkpoints kept (older ones are deleted)
    resume: bool = True               # resume from the run dir's latest complete checkpoint if there is one
    export: bool = True               # at the end, write <run_dir>/export/ in the format diffusers / peft load


@dataclass
class OptimizerConfig:
    _target_: str = "torch.optim.AdamW"
    _partial_: bool = True
    lr: float = 1e-5
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    weight_decay: float = 1e-4
    eps: float = 1e-8


@dataclass
class TrainConfig:
    method: Any = MISSING
    model: Any = MISSING
    reward: Any = MISSING
    data: Any = MISSING
    cluster: Any = MISSING
    logger: Any = MISSING
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    task_name: str = "train"
    output_root: str = "outputs"


def all_schemas() -> dict[str, dict[str, type]]:
    """``{group: {name: schema}}`` gathered from every module of :mod:`launcher.schemas`."""
    from launcher import schemas

    out: dict[str, dict[str, type]] = {}
    for info in sorted(pkgutil.iter_modules(schemas.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"launcher.schemas.{info.name}")
        for group, entries in getattr(module, "SCHEMAS", {}).items():
            for name, node in entries.items():
                if name in out.setdefault(group, {}):
                    raise RuntimeError(f"schema/{group}/{name} is defined twice (launcher.schemas.{info.name})")
                out[group][name] = node
    return out


def register_resolvers() -> None:
    """Small resolvers used by conf/cluster/*.yaml to map our keys onto the submitit launcher's."""
    from omegaconf import OmegaConf

    OmegaConf.register_new_resolver("rf_null_if_zero", lambda x: None if x in (0, "0") else x, replace=True)


def register_configs() -> None:
    register_resolvers()
    cs = ConfigStore.instance()
    cs.store(name="train_schema", node=TrainConfig)
    for group, entries in all_schemas().items():
        for name, node in entries.items():
            cs.store(group=f"schema/{group}", name=name, node=node)
