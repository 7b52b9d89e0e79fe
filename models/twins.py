"""Shared plumbing of the tiny twins: a folder written once with ``save_pretrained`` into a cache keyed by a hash of
the recipe, so every twin is loaded back through its family's real adapter (``from_pretrained``)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, TypeVar

from filelock import FileLock

from rewardflow.cache_dir import default_cache_dir

ModelT = TypeVar("ModelT")


def recipe_key(*parts) -> str:
    return hashlib.sha1(json.dumps(list(parts), default=str, sort_keys=True).encode()).hexdigest()[:10]


def materialize(prefix: str, key: str, build: Callable[[], Any], cache_dir: str | Path | None = None) -> Path:
    """Write ``build()`` (a diffusers pipeline) to ``<cache>/<prefix>-<key>`` once with ``save_pretrained`` and
    return the folder (see :func:`materialize_folder`)."""

    def write(folder: Path) -> None:
        pipe = build()
        for component in pipe.components.values():
            save_on_any_rank(component)
        pipe.save_pretrained(folder)

    return materialize_folder(prefix, key, write, cache_dir)


def save_on_any_rank(model: ModelT) -> ModelT:
    """Let a transformers model built whole on this rank save its weights here. transformers writes weights only on
    torch.distributed rank 0 (it assumes every rank holds the same or a sharded model that rank 0 writes), but a
    twin is built by whichever rank fills its cache: with a node-local ``cluster.cache_dir``, the first rank of every
    node. The override is on this instance only; other models keep transformers' rule."""
    if hasattr(model, "should_save_on_this_rank"):
        model.should_save_on_this_rank = lambda is_main_process=True: is_main_process
    return model


def materialize_folder(
    prefix: str,
    key: str,
    write: Callable[[Path], None],
    cache_dir: str | Path | None = None,
    marker: str = "model_index.json",
) -> Path:
    """Run ``write(folder)`` once into ``<cache>/<prefix>-<key>``, whose ``marker`` file says it is complete, and
    return the folder. Atomic: written into a temporary folder and renamed, under a file lock, so concurrent ranks,
    sweep jobs or test workers build it one at a time and never read a half-written folder."""
    target = Path(cache_dir or default_cache_dir()) / f"{prefix}-{key}"
    if (target / marker).exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if (target / marker).exists():
            return target
        tmp = Path(tempfile.mkdtemp(prefix=f".{prefix}-", dir=target.parent))
        try:
            write(tmp)
            empty = [p.name for p in tmp.iterdir() if p.is_dir() and not any(p.iterdir())]
            if empty:  # transformers writes no weights on a torch.distributed rank other than 0
                raise RuntimeError(
                    f"tiny twin components {empty} were not written: pass transformers models "
                    f"through models.twins.save_on_any_rank before saving them"
                )
            if not (tmp / marker).exists():
                raise RuntimeError(f"{prefix}: the writer did not produce {marker}")
            tmp.rename(target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target


class TinyTwin:
    """Mixed in before a family's backbone (``class TinyFluxBackbone(TinyTwin, FluxBackbone)``): with
    ``model.path=null`` the twin is written into ``model.cache_dir`` on first use (``materialize(cache_dir, seed)``,
    e.g. :func:`models.tiny_flux.materialize_tiny_flux`) and loaded through the family's real adapter."""

    materialize: Callable[[str | None, int], Path]

    def __init__(self, cfg: Any, keep_reference: bool = False):
        folder = cfg.path or str(type(self).twin_folder(cfg))
        # the export names the twin by its recipe, not by this machine's cache path (models/export.py)
        self.twin_recipe = f"rewardflow tiny twin: model={cfg.name} " + (
            type(self).recipe_overrides(cfg) if not cfg.path else f"model.path=<{Path(cfg.path).name}>"
        )
        super().__init__(dataclasses.replace(cfg, path=folder), keep_reference)  # type: ignore[call-arg]

    @classmethod
    def twin_folder(cls, cfg: Any) -> Path:
        """The folder of the twin ``cfg`` names, written on first use (a variant with more recipe keys overrides it:
        models/tiny_flux_pretrained.py)."""
        return cls.materialize(cfg.cache_dir, cfg.seed)

    @classmethod
    def recipe_overrides(cls, cfg: Any) -> str:
        """The config keys that name this twin's recipe, as the export records them."""
        return f"model.seed={cfg.seed}"
