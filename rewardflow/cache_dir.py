"""The folder rewardflow's caches live in: ``$REWARDFLOW_CACHE``, else ``~/.cache/rewardflow`` (the tiny twins, the
text-embedding cache, the named prompt sets). ``cluster.cache_dir`` sets the variable for a run's processes
(launcher/cluster/node_cache.py)."""

from __future__ import annotations

import os
from pathlib import Path


def default_cache_dir() -> Path:
    return Path(os.environ.get("REWARDFLOW_CACHE", Path.home() / ".cache" / "rewardflow"))
