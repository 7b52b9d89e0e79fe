"""How the launcher finds a config group's component (the class its ``_target_`` names) and builds it from its typed
config: ``ComponentCls(cfg, *args)`` with ``cfg`` the group's dataclass (``OmegaConf.to_object``)."""

from __future__ import annotations

from typing import Any

from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf

from rewardflow.errors import ConfigError

#: the class a config group's component derives from, by name (comparing names imports nothing more)
GROUP_BASES = {
    "method": "methods.base.Method",
    "model": "models.backbone.Backbone",
    "reward": "rewards.base.Reward",
    "data": "launcher.train.data.PromptSource",
    "logger": "launcher.tracking.wandb_logger.WandbLogger",
}


def component_class(node: Any, key: str) -> type[Any]:
    """The class ``<key>._target_`` names; a :class:`ConfigError` when it cannot be imported, or when it is not a
    component of the group ``key`` names (a model's ``_target_`` naming a reward class, a function, ...)."""
    target = node._target_
    try:
        cls = get_class(target)
    except Exception as e:  # noqa: BLE001 - hydra wraps import errors
        raise ConfigError(
            f"{key}._target_={target!r} cannot be imported ({e}). Fix: pick an existing {key} option "
            f"(`rewardflow --help` lists them)"
        ) from None
    group = "reward" if key.startswith("eval.rewards.") else key.split(".")[0].split("=")[0]
    base = GROUP_BASES.get(group)
    names = {f"{c.__module__}.{c.__qualname__}" for c in getattr(cls, "__mro__", ())}
    if base is not None and base not in names:
        what = f"a subclass of {base}"
        raise ConfigError(
            f"{key}._target_={target!r} is not a {group} component (a {group} component is {what}). Fix: pick a "
            f"{group} option ({group}=<name>; `rewardflow --help` lists them) and leave {key}._target_ as it sets it"
        )
    return cls


def build(node: DictConfig, key: str, *args: Any, **kwargs: Any) -> Any:
    """The component of the config group ``node`` (at ``key``), built from its typed config."""
    return component_class(node, key)(OmegaConf.to_object(node), *args, **kwargs)
