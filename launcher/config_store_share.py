"""Hydra's repository copies share rewardflow's ConfigStore instead of deep-copying it (what made ``--help`` slow).

Every config lookup of Hydra 1.3 builds a ``CachingConfigRepository``, which deep-copies its delegate repository
"to avoid mutating it with initialize_sources()"; that delegate's structured-config source holds the ConfigStore
singleton, so each lookup also deep-copied every stored node. rewardflow stores one ``schema/<group>/<name>`` node
per component config (launcher/config.py, ~130), and ``rewardflow --help`` lists the config groups through ~135
lookups: 3-20 s of copying (issue 29, item 4). Hydra's own fix reads ``ConfigStore.instance()`` at each lookup
instead of keeping it on the source (facebookresearch/hydra pull request 2928, not in a 1.3 release); sharing the
store on copy is the same behaviour for the installed Hydra. It is safe: the store already deep-copies a node when a
config is loaded from it (``ConfigStore.load``), so no copy of a repository can change what the store holds, and a
copy that shares it also sees configs stored later, as Hydra's fix intends.
"""

from __future__ import annotations

from typing import Any

from hydra.core.config_store import ConfigStore


def _same_store(self: ConfigStore, memo: dict[int, Any]) -> ConfigStore:
    return self


def share_config_store() -> None:
    """Make ``copy.deepcopy`` of the ConfigStore return the store itself (idempotent)."""
    ConfigStore.__deepcopy__ = _same_store
