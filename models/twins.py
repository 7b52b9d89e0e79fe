"""Shared plumbing of the tiny twins: a folder written once with ``save_pretrained`` into a cache keyed by a hash of
the recipe, so every twin is loaded back through its family's real adapter (``from_pretrained``)."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable


def default_cache_dir() -> Path:
    return Path(os.environ.get("REWARDFLOW_CACHE", Path.home() / ".cache" / "rewardflow"))


def recipe_key(*parts) -> str:
    return hashlib.sha1(json.dumps(list(parts), default=str, sort_keys=True).encode()).hexdigest()[:10]


def materialize(prefix: str, key: str, build: Callable[[], object], cache_dir: str | Path | None = None) -> Path:
    """Write ``build()`` (a diffusers pipeline) to ``<cache>/<prefix>-<key>`` once, atomically (temp dir + rename,
    so concurrent ranks or test workers never read a half-written folder), and return the folder."""
    target = Path(cache_dir or default_cache_dir()) / f"{prefix}-{key}"
    if (target / "model_index.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{prefix}-", dir=target.parent))
    try:
        build().save_pretrained(tmp)
        try:
            tmp.rename(target)
        except OSError:
            if not (target / "model_index.json").exists():   # another process won the race only if it finished
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
