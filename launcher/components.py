"""How the launcher finds a config group's component (the class its ``_target_`` names) and builds it from its typed
config: ``ComponentCls(cfg, *args)`` with ``cfg`` the group's dataclass (``OmegaConf.to_object``)."""

from __future__ import annotations

from typing import Any

from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf

from rewardflow.errors import ConfigError


def component_class(node: Any, key: str) -> type[Any]:
    """The class ``<key>._target_`` names; a :class:`ConfigError` when it cannot be imported."""
    target = node._target_
    try:
        return get_class(target)
    except Exception as e:  # noqa: BLE001 - hydra wraps import errors
        raise ConfigError(
            f"{key}._target_={target!r} cannot be imported ({e}). Fix: pick an existing {key} option "
            f"(`rewardflow --help` lists them)"
        ) from None


def build(node: DictConfig, key: str, *args: Any, **kwargs: Any) -> Any:
    """The component of the config group ``node`` (at ``key``), built from its typed config."""
    return component_class(node, key)(OmegaConf.to_object(node), *args, **kwargs)
