"""Keys added with ``+key=value`` that no component reads.

Hydra's ``+`` adds a key even to a typed config (the form its own "Key not in struct" error suggests), so
``+method.clip_rnage=0.1`` used to run with the misspelt key silently unused. Every config node backed by a
dataclass must hold that dataclass's fields only; free-form nodes (``Dict[str, Any]`` fields such as
``reward.weights`` or ``cluster.additional_parameters``) take any key.
"""

from __future__ import annotations

import dataclasses
import difflib

from omegaconf import DictConfig, OmegaConf

from rewardflow.errors import ConfigErrors


def unknown_keys(node: DictConfig, prefix: str = "") -> list[tuple[str, list[str]]]:
    """``(full key, valid keys of its node)`` for every key of ``node`` (recursively) its dataclass does not have."""
    out = []
    schema = OmegaConf.get_type(node)
    fields = [f.name for f in dataclasses.fields(schema)] if dataclasses.is_dataclass(schema) else None
    for key in node.keys():
        full = prefix + str(key)
        if fields is not None and key not in fields:
            out.append((full, fields))
            continue
        child = node._get_node(key)
        if isinstance(child, DictConfig) and not child._is_none() and not child._is_missing():
            out.extend(unknown_keys(child, full + "."))
    return out


def check_keys(cfg: DictConfig, errors: ConfigErrors) -> None:
    for key, valid in unknown_keys(cfg):
        parent, _, name = key.rpartition(".")
        close = difflib.get_close_matches(name, valid, n=1)
        hint = f"did you mean {parent + '.' if parent else ''}{close[0]}? " if close else ""
        errors.require(
            False,
            key,
            f"is not a key of this config (nothing reads it; added with +{key}?). "
            f"Fix: {hint}remove it, or see `rewardflow --cfg job` for the keys"
            f"{' of ' + parent if parent else ''}",
        )
