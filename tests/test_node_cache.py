"""launcher/cluster/node_cache.py on 4 gloo processes posing as 2 nodes x 2 ranks (each rank reports its node's host name):
a cache folder the nodes share is filled once, by rank 0, before any other rank reads it; node-local folders (a
different folder per node at the configured path, as node-local disks are) are filled once per node, by the node's
first rank, before the node's other ranks read them. The real two-node version runs in tests/test_slurm_multinode.py."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest

from dist_utils import run_distributed

pytestmark = pytest.mark.slow


def _fill(rank, world, root, node_local):
    from launcher.cluster.node_cache import cache_builders_first
    from models.twins import materialize_folder
    from rewardflow.distributed import current_world

    node = rank // 2
    socket.gethostname = lambda: f"node{node}"  # what each rank's host would answer on 2 real nodes
    cache_dir = Path(root) / (f"node{node}" if node_local else "shared")
    events = Path(root) / "events.jsonl"

    def write(folder: Path) -> None:  # a slow cache build, logged
        with open(events, "a") as fh:
            fh.write(json.dumps({"built_by": rank, "in": str(cache_dir)}) + "\n")
        time.sleep(1.0)
        (folder / "done").write_text("")

    with cache_builders_first(str(cache_dir), current_world()) as folder:
        t_enter = time.time()
        materialize_folder("twin", "k", write, folder, marker="done")
        t_exit = time.time()
    return {"rank": rank, "node": node, "enter": t_enter, "exit": t_exit, "folder": str(folder)}


@pytest.mark.parametrize("node_local", [False, True], ids=["shared", "node_local"])
def test_cache_is_filled_once_per_folder_before_the_other_ranks_read_it(tmp_path, node_local):
    results = run_distributed(_fill, 4, str(tmp_path), node_local, timeout=600)
    builds = [json.loads(l) for l in (tmp_path / "events.jsonl").read_text().splitlines()]
    if node_local:
        assert sorted(b["built_by"] for b in builds) == [0, 2]  # the first rank of each node, once each
        for r in results:
            builder = results[2 * r["node"]]
            assert r["folder"] == builder["folder"] == str(tmp_path / f"node{r['node']}")
            if r is not builder:
                assert r["enter"] >= builder["exit"]  # read only once its node's copy is done
        assert all((tmp_path / f"node{n}" / "twin-k" / "done").exists() for n in (0, 1))
    else:
        assert [b["built_by"] for b in builds] == [0]  # rank 0, once for everybody
        assert all(r["enter"] >= results[0]["exit"] for r in results[1:])
    assert not list(tmp_path.rglob(".rewardflow-probe-*"))  # the sharing probes are cleaned up
