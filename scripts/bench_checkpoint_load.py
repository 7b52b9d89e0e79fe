"""What loading checkpoints as plain data costs: DCP's own load against rewardflow's (``launcher/checkpoint/safe_dcp.py``: the
restricted ``.metadata`` unpickler and ``weights_only`` for non-tensor entries), and the cheap check that runs before
each resume (``CheckpointManager.problem``), measured side by side in one process.

A stack of ``--layers`` 1024x1024 linear layers with its AdamW state is saved once; each round loads it both ways and
runs the check, in alternating order; every figure is the median over the rounds.

    .venv/bin/python scripts/bench_checkpoint_load.py                # ~1 min on 2 CPU cores
    .venv/bin/python scripts/bench_checkpoint_load.py --layers 96 --rounds 3

The last output line is one JSON object (``safe_over_plain_load``, ``check_over_plain_load`` and the times in s).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import warnings

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

from launcher.checkpoint.manager import CheckpointManager
from launcher.checkpoint.safe_dcp import SafeFileSystemReader, SafeLoadPlanner
from rewardflow.distributed import World


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=24, help="1024x1024 linear layers (24: 25 M parameters)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    warnings.filterwarnings("ignore", message="torch.distributed is disabled")
    torch.set_num_threads(1)
    model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(args.layers)])
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 1024)).sum().backward()
    optimizer.step()
    manager = CheckpointManager(tempfile.mkdtemp(prefix="bench_checkpoint_load_"), World())
    path = manager.save(0, model, optimizer, {})

    def target():
        model_sd, optim_sd = get_state_dict(model, optimizer, options=StateDictOptions(ignore_frozen_params=True))
        return {"model": model_sd, "optim": optim_sd}

    ways = {
        "plain_load_s": lambda: dcp.load(target(), checkpoint_id=str(path), no_dist=True),
        "safe_load_s": lambda: dcp.load(
            target(), storage_reader=SafeFileSystemReader(str(path)), planner=SafeLoadPlanner(), no_dist=True
        ),
        "check_s": lambda: manager.problem(path),
    }
    times: dict[str, list[float]] = {k: [] for k in ways}
    for r in range(args.rounds):
        order = list(ways) if r % 2 == 0 else list(reversed(ways))
        for name in order:
            t0 = time.perf_counter()
            ways[name]()
            times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    size_mb = sum(f.stat().st_size for f in path.iterdir()) / 1e6
    params = sum(p.numel() for p in model.parameters())
    print(f"{params / 1e6:.1f} M parameters + AdamW state, checkpoint {size_mb:.0f} MB, {args.rounds} rounds")
    for name, value in med.items():
        print(f"  {name}: {value * 1000:.1f} ms")
    print(
        json.dumps(
            {
                "safe_over_plain_load": round(med["safe_load_s"] / med["plain_load_s"], 3),
                "check_over_plain_load": round(med["check_s"] / med["plain_load_s"], 3),
                **{k: round(v, 4) for k, v in med.items()},
                "parameters": params,
                "checkpoint_mb": round(size_mb, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
