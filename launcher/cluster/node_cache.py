"""Who fills the job's caches first: global rank 0, or the first rank of every node when the cache folder is
node-local.

Tiny twins, downloads and other files the ranks build before training are written by one rank while the others
wait, then read by all (concurrent builders would race, and transformers saves weights on rank 0 only). On one node,
or when the nodes share the folder (a network filesystem), that one rank is global rank 0. When every node has its
own folder at the same path (``cluster.cache_dir`` on a node-local scratch disk), rank 0's files are invisible to the
other nodes, so the first rank of each node builds its node's copy, once per node, while the node's other ranks
wait. Which case holds is measured at start-up, not configured: each node's first rank writes a probe file and every
rank looks for all of them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import uuid
from pathlib import Path
from typing import Iterator

from rewardflow.distributed import (
    World,
    all_gather_objects,
    all_reduce_sum,
    barrier,
    broadcast_object,
    collective_device,
)

log = logging.getLogger(__name__)


def cache_folder(cache_dir: str | None) -> Path:
    """The folder rewardflow's caches go to: ``cluster.cache_dir`` if set (exported as ``REWARDFLOW_CACHE``, which
    the tiny twins and benches read), else ``$REWARDFLOW_CACHE`` or ``~/.cache/rewardflow``."""
    from models.twins import default_cache_dir

    if cache_dir:
        os.environ["REWARDFLOW_CACHE"] = str(cache_dir)
    folder = default_cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:  # read-only: fine as long as everything needed is already there
        pass
    return folder


def first_rank_of_each_node() -> list[int]:
    """Collective: the lowest rank on every host, in rank order (hosts by name, not by rank layout)."""
    hosts = all_gather_objects(socket.gethostname())
    return sorted({host: hosts.index(host) for host in hosts}.values())


def shared_by_all_nodes(folder: Path, world: World, first_ranks: list[int]) -> bool:
    """Collective: True if every rank sees the probe file that the first rank of every node wrote into ``folder``
    (also True if a probe could not be written: a read-only cache is only read, and rank 0 going first is safe)."""
    import torch

    if len(first_ranks) <= 1:
        return True
    token = broadcast_object(uuid.uuid4().hex if world.is_main else None)
    probes = [folder / f".rewardflow-probe-{token}-{rank}" for rank in first_ranks]
    mine = probes[first_ranks.index(world.rank)] if world.rank in first_ranks else None
    unwritable = 0.0
    if mine is not None:
        try:
            mine.write_text(socket.gethostname())
        except OSError:
            unwritable = 1.0
    barrier()
    missing = sum(not p.exists() for p in probes)
    counts = all_reduce_sum(torch.tensor([missing, unwritable], dtype=torch.float64, device=collective_device()))
    barrier()  # everyone has looked before the probes go
    if mine is not None:
        mine.unlink(missing_ok=True)
    return bool(counts[1] > 0 or counts[0] == 0)


@contextlib.contextmanager
def cache_builders_first(cache_dir: str | None, world: World) -> Iterator[Path]:
    """Run the block on the cache builders first (rank 0; or the first rank of every node if the cache folder is
    node-local), then on every other rank. Yields the cache folder. Call on every rank."""
    folder = cache_folder(cache_dir)
    first_ranks = first_rank_of_each_node()
    shared = shared_by_all_nodes(folder, world, first_ranks)
    builders = [0] if shared else first_ranks
    if len(first_ranks) > 1:
        log.info(
            "cache %s is %s",
            folder,
            f"shared by the {len(first_ranks)} nodes: rank 0 fills it, the other ranks then read it"
            if shared
            else f"node-local (not shared by the {len(first_ranks)} nodes): the first rank of each node "
            f"(ranks {', '.join(map(str, first_ranks))}) fills its node's copy, the node's other ranks then "
            f"read it",
        )
    is_builder = world.rank in builders
    if not is_builder:
        barrier()
    try:
        yield folder
    finally:
        if is_builder:
            barrier()
