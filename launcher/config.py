"""Typed configs: the root schema, and the discovery of every component's config dataclass.

Each component owns its config dataclass, in a light module beside it named ``<module>_config.py`` (e.g.
``methods/grpo_config.py`` beside ``methods/grpo.py``) that imports nothing heavy: the CLI composes configs before
torch is imported. Every such module of :data:`PACKAGES` that defines ``SCHEMAS = {group: {name: dataclass}}`` is
registered as ``schema/<group>/<name>`` in Hydra's ConfigStore, so adding a method, model or reward never edits a
shared registry. The dataclass holds the defaults (a method's are its official recipe's); a YAML option under
``conf/<group>/`` starts from its schema (``defaults: - /schema/<group>/<name>@_here_``) and sets only what differs,
so a misspelt key, a value of the wrong type or an unknown mode fails at composition time. Checks that need more than
a type are each component's ``check`` hook, run by :mod:`launcher.validate` before anything is built.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Iterator

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig

from launcher.evaluate_config import EvaluateConfig
from launcher.protocol_config import ProtocolConfig
from launcher.train.eval_config import EvalConfig
from launcher.train.trainer_config import OptimizerConfig, TrainerConfig

#: cluster=local's sweep launcher (launcher/cluster/local_sweep.py)
LOCAL_SWEEP_LAUNCHER = "hydra_plugins.rewardflow_launchers.local_sweep_launcher.LocalSweepLauncher"
#: the packages whose ``*_config`` modules hold component configs
PACKAGES = ("launcher", "methods", "models", "rewards")


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
    eval: EvalConfig = field(default_factory=EvalConfig)
    protocol: ProtocolConfig = field(default_factory=ProtocolConfig)
    task_name: str = "train"
    output_root: str = "outputs"


@dataclass
class EvaluateRunConfig(TrainConfig):
    """``rewardflow-eval``'s config (conf/evaluate.yaml): the training config, whose ``model``, ``reward`` and
    ``eval.*`` it scores with, plus what to score (``evaluate.*``)."""

    evaluate: EvaluateConfig = field(default_factory=EvaluateConfig)
    task_name: str = "evaluate"


def config_modules() -> Iterator[ModuleType]:
    """Every ``<package>.<name>_config`` module of :data:`PACKAGES` and of their subpackages (``launcher.train``,
    ``launcher.tracking``, ...), in a stable order."""
    for package in PACKAGES:
        yield from _config_modules_under(package)


def _config_modules_under(package: str) -> Iterator[ModuleType]:
    module = importlib.import_module(package)
    for info in sorted(pkgutil.iter_modules(module.__path__), key=lambda i: i.name):
        if info.ispkg:
            yield from _config_modules_under(f"{package}.{info.name}")
        elif info.name.endswith("_config"):
            yield importlib.import_module(f"{package}.{info.name}")


def all_schemas() -> dict[str, dict[str, type]]:
    """``{group: {name: dataclass}}`` gathered from the ``SCHEMAS`` of every config module."""
    out: dict[str, dict[str, type]] = {}
    for module in config_modules():
        for group, entries in getattr(module, "SCHEMAS", {}).items():
            for name, node in entries.items():
                if name in out.setdefault(group, {}):
                    raise RuntimeError(f"schema/{group}/{name} is defined twice ({module.__name__})")
                out[group][name] = node
    return out


def register_resolvers() -> None:
    """Small resolvers used by conf/cluster/*.yaml to map our keys onto the submitit launcher's, by the cluster
    schemas' computed defaults (launcher/cluster/cluster_defaults.py), and by the help page (conf/hydra/default.yaml)
    to list the config groups."""
    from omegaconf import OmegaConf

    from launcher.cli_help import config_groups_text
    from launcher.cluster.cluster_defaults import register_resolvers as register_cluster_resolvers

    OmegaConf.register_new_resolver("rf_null_if_zero", lambda x: None if x in (0, "0") else x, replace=True)
    OmegaConf.register_new_resolver("rf_config_groups", config_groups_text, replace=True)
    register_cluster_resolvers()  # the cluster=slurm defaults computed from the plan


def register_configs() -> None:
    from launcher.config_store_share import share_config_store

    share_config_store()  # Hydra's lookups copy the store ~135 times for `--help` (see that module)
    register_resolvers()
    cs = ConfigStore.instance()
    cs.store(name="train_schema", node=TrainConfig)
    cs.store(name="evaluate_schema", node=EvaluateRunConfig)  # rewardflow-eval (conf/evaluate.yaml)
    # cluster=local's sweep launcher (conf/cluster/local.yaml); Hydra instantiates launchers from hydra_plugins only
    cs.store(group="hydra/launcher", name="rewardflow_local", node={"_target_": LOCAL_SWEEP_LAUNCHER})
    # cluster=slurm's (conf/cluster/slurm.yaml): hydra-submitit-launcher's, every value from cluster.*
    from launcher.cluster.slurm_launcher import RewardflowSlurmConf

    cs.store(group="hydra/launcher", name="rewardflow_slurm", node=RewardflowSlurmConf)
    for group, entries in all_schemas().items():
        for name, node in entries.items():
            cs.store(group=f"schema/{group}", name=name, node=node)


def compose(overrides: list[str] | None = None, config_name: str = "train") -> DictConfig:
    """The run config ``rewardflow <overrides>`` composes, from the configs the CLI reads
    (:func:`launcher.installation.config_path`), for scripts and tests; the CLI composes through Hydra's main, which
    also sets up the run directory."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    from launcher.installation import config_path

    register_configs()
    GlobalHydra.instance().clear()
    path = config_path()
    if path.startswith("pkg://"):
        context = initialize_config_module(config_module=path.removeprefix("pkg://"), version_base="1.3")
    else:
        context = initialize_config_dir(config_dir=path, version_base="1.3")
    with context:
        return hydra_compose(config_name=config_name, overrides=list(overrides or []))
