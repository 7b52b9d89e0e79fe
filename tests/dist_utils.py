"""Run a function in N local processes with a gloo process group (CPU), for real multi-process tests.

``run_distributed(fn, world_size, *args)`` spawns the processes, calls ``fn(rank, world_size, *args)`` in each
after ``init_process_group("gloo")``, and returns the list of per-rank return values (picklable). A failure in any
rank raises in the caller, with that rank's traceback.
"""

from __future__ import annotations

import os
import socket
import tempfile
import time
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank, world_size, port, out_dir, fn, args):
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank)
    )
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        result = ("ok", fn(rank, world_size, *args))
    except BaseException:  # noqa: BLE001 - reported to the parent
        result = ("error", traceback.format_exc())
    finally:
        dist.destroy_process_group()
    torch.save(result, os.path.join(out_dir, f"rank{rank}.pt"))


def run_distributed(fn, world_size: int, *args, timeout: float = 300.0):
    with tempfile.TemporaryDirectory() as out_dir:
        ctx = mp.start_processes(
            _worker,
            args=(world_size, free_port(), out_dir, fn, args),
            nprocs=world_size,
            join=False,
            start_method="spawn",
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(p.is_alive() for p in ctx.processes):
            time.sleep(0.2)
        if any(p.is_alive() for p in ctx.processes):
            for p in ctx.processes:
                p.kill()
            raise TimeoutError(f"distributed test did not finish in {timeout} s")
        results = []
        for rank in range(world_size):
            path = os.path.join(out_dir, f"rank{rank}.pt")
            if not os.path.exists(path):
                raise RuntimeError(f"rank {rank} died without a result (exit code {ctx.processes[rank].exitcode})")
            status, value = torch.load(path, weights_only=False)
            if status != "ok":
                raise RuntimeError(f"rank {rank} failed:\n{value}")
            results.append(value)
        return results
