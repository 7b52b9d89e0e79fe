"""``rewardflow --cfg hydra --resolve``: Hydra's config printed with its values resolved.

Hydra prints the ``hydra`` node after deleting the job's keys, but our run and sweep folders and the cluster
launchers' settings interpolate job keys (``${output_root}``, ``${cluster.nodes}``), so resolving ended in
``InterpolationKeyError: Interpolation key 'output_root' not found``. Around Hydra's main, when that is asked,
:func:`hydra_cfg_resolved_in_context` makes Hydra resolve the ``hydra`` node inside the whole config before the job's
keys are deleted; anything else runs untouched.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Iterator

from omegaconf import DictConfig, ListConfig, flag_override


def _asks_resolved_hydra_cfg(argv: list[str]) -> bool:
    pairs = list(zip(argv, argv[1:]))
    return "--resolve" in argv and any(a in ("--cfg", "-c") and b == "hydra" for a, b in pairs)


def _sanitized_resolved(src_cfg: DictConfig) -> DictConfig:
    """Hydra's ``get_sanitized_hydra_cfg`` (only the ``hydra`` node, without its help texts), resolved first."""
    cfg = copy.deepcopy(src_cfg)
    with flag_override(cfg.hydra, ["struct", "readonly"], [False, False]):
        del cfg.hydra["hydra_help"]
        del cfg.hydra["help"]
    with flag_override(cfg, ["struct", "readonly"], [False, False]):
        hydra = _resolved(cfg.hydra)
        for key in list(cfg.keys()):
            if key != "hydra":
                del cfg[key]
        cfg.hydra = hydra
    return cfg


def _resolved(node):
    """A plain copy of ``node`` with every value resolved that can be (``hydra.job.num`` is only set in a sweep's
    jobs: ``hydra.sweep.subdir`` keeps its interpolation)."""
    if isinstance(node, DictConfig):
        return {key: _resolved(node._get_node(key)) for key in node.keys()}
    if isinstance(node, ListConfig):
        return [_resolved(node._get_node(i)) for i in range(len(node))]
    if not node._is_interpolation():
        return node._value()
    try:
        value = node._dereference_node()
    except Exception:  # noqa: BLE001 - an interpolation that cannot be resolved outside a job is printed as is
        return node._value()
    return node._value() if value._is_missing() else value._value()


@contextlib.contextmanager
def hydra_cfg_resolved_in_context(argv: list[str]) -> Iterator[None]:
    if not _asks_resolved_hydra_cfg(argv):
        yield
        return
    from hydra._internal.hydra import Hydra

    original = Hydra.get_sanitized_hydra_cfg
    Hydra.get_sanitized_hydra_cfg = staticmethod(_sanitized_resolved)
    try:
        yield
    finally:
        Hydra.get_sanitized_hydra_cfg = original
