"""Collective traffic of one FSDP2 training step on the 1-D mesh (``cluster.mesh=fsdp``) against the 2-D HSDP mesh
(``cluster.mesh=hsdp``), measured on the process groups, side by side in one run.

``--nodes`` x ``--ranks-per-node`` processes (gloo on the CPU, NCCL with ``--device cuda``) pose as that many nodes
(``LOCAL_WORLD_SIZE`` as SLURM + submitit export it, so ``launcher.cluster.mesh.build_mesh`` puts one node in each HSDP shard
group). Each builds the same FLUX-class transformer, shards it with ``FluxBackbone.shard_transformer`` on each
mesh in turn and runs one training step (forward, backward, optimizer step) under a ``TorchDispatchMode`` that sees
every ``c10d`` collective FSDP2 issues, with its process group and tensors. A collective *crosses nodes* when its group
holds ranks of more than one node: the whole 1-D mesh, or HSDP's replicate groups. Bytes are each collective's
payload on one rank (all-gather: the gathered tensor; reduce-scatter: the full gradient it reduces; all-reduce: the
tensor), summed over one step and averaged over ranks; what the wire carries is (g - 1) / g of that in a ring of g
ranks (twice that for an all-reduce).

Expected: all-gather bytes across nodes are 0 under HSDP (parameters are gathered inside a node only), against twice
the parameter bytes on the 1-D mesh (every block gathered in the forward and again in the backward, with
``reshard_after_forward``); gradients cross nodes once per step under HSDP, as an all-reduce of a 1/ranks-per-node
slice. The last output line is one JSON object with every figure.

    .venv/bin/python scripts/bench_mesh.py                       # 2 nodes x 2 ranks, FLUX "small", ~1 CPU-min
    .venv/bin/python scripts/bench_mesh.py --nodes 2 --ranks-per-node 4 --config tiny
    .venv/bin/python scripts/bench_mesh.py --device cuda --nodes 1 --ranks-per-node 8 --config wide   # 8 GPUs
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from flux_bench_models import CONFIGS  # noqa: E402  (the same FLUX-class configs as the other benches)

KINDS = {
    "_allgather_base_": "all_gather",
    "allgather_": "all_gather",
    "allgather_into_tensor_coalesced_": "all_gather",
    "_reduce_scatter_base_": "reduce_scatter",
    "reduce_scatter_": "reduce_scatter",
    "reduce_scatter_tensor_coalesced_": "reduce_scatter",
    "allreduce_": "all_reduce",
    "allreduce_coalesced_": "all_reduce",
    "broadcast_": "broadcast",
}


def _tensors(x) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for item in x for t in _tensors(item)]
    return []


class CollectiveCounter(TorchDispatchMode):
    """Payload bytes and calls of the c10d collectives, keyed by (kind, whether the group crosses nodes)."""

    def __init__(self, ranks_per_node: int):
        super().__init__()
        self.ranks_per_node = ranks_per_node
        self.bytes: dict[tuple[str, bool], float] = defaultdict(float)
        self.calls: dict[tuple[str, bool], int] = defaultdict(int)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name
        if name.startswith("c10d::") and name[len("c10d::") :] in KINDS:
            kind = KINDS[name[len("c10d::") :]]
            # the dispatcher hands the group over boxed (a ScriptObject): unbox it to ask for its ranks
            group = next(a for a in args if isinstance(a, torch.ScriptObject) and "ProcessGroup" in str(a._type()))
            ranks = dist.get_process_group_ranks(dist.ProcessGroup.unbox(group))
            crosses = len({r // self.ranks_per_node for r in ranks}) > 1
            # all-gather: the output is the gathered tensor; the others: the first tensor argument is the payload
            data = _tensors(args[0])
            size = sum(t.numel() * t.element_size() for t in data)
            if kind == "reduce_scatter":
                size = sum(t.numel() * t.element_size() for t in _tensors(args[1]))
            self.bytes[(kind, crosses)] += size
            self.calls[(kind, crosses)] += 1
        return func(*args, **(kwargs or {}))


def _one_step(mesh_kind: str, config: str, device: str, ranks_per_node: int, seed: int = 0) -> dict:
    from diffusers import FluxTransformer2DModel
    from omegaconf import OmegaConf

    from launcher.cluster.mesh import build_mesh, describe
    from models.flux import FluxBackbone
    from rewardflow.distributed import current_world

    mesh = build_mesh(OmegaConf.create({"mesh": mesh_kind, "shard_size": None}), current_world(), device)
    torch.manual_seed(seed)
    model = FluxTransformer2DModel(**CONFIGS[config]).to(device)
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    FluxBackbone.shard_transformer(model, mesh)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    cfg = CONFIGS[config]
    g = torch.Generator().manual_seed(seed + dist.get_rank())
    tokens, text = 64, 8
    inputs = dict(
        hidden_states=torch.randn(2, tokens, cfg["in_channels"], generator=g),
        encoder_hidden_states=torch.randn(2, text, cfg["joint_attention_dim"], generator=g),
        pooled_projections=torch.randn(2, cfg["pooled_projection_dim"], generator=g),
        timestep=torch.rand(2, generator=g),
        txt_ids=torch.zeros(text, 3),
        img_ids=torch.stack(
            torch.meshgrid(torch.zeros(1), torch.arange(8.0), torch.arange(8.0), indexing="ij"), -1
        ).reshape(tokens, 3),
        guidance=torch.full((2,), 3.5) if cfg.get("guidance_embeds") else None,
    )
    inputs = {k: (v.to(device) if torch.is_tensor(v) else v) for k, v in inputs.items()}
    counter = CollectiveCounter(ranks_per_node)
    with counter:
        out = model(**inputs, return_dict=False)[0]
        (out**2).mean().backward()
        opt.step()
    return {
        "mesh": describe(mesh),
        "param_bytes": param_bytes,
        "bytes": {f"{k}{'/cross_node' if c else '/in_node'}": v for (k, c), v in counter.bytes.items()},
        "calls": {f"{k}{'/cross_node' if c else '/in_node'}": v for (k, c), v in counter.calls.items()},
    }


def _worker(rank: int, world: int, port: int, args, out_dir: str) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank % args.ranks_per_node),
        LOCAL_WORLD_SIZE=str(args.ranks_per_node),
    )
    torch.set_num_threads(1)
    if args.device == "cuda":
        torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group("nccl" if args.device == "cuda" else "gloo", rank=rank, world_size=world)
    try:
        result = {kind: _one_step(kind, args.config, args.device, args.ranks_per_node) for kind in ("fsdp", "hsdp")}
    finally:
        dist.destroy_process_group()
    torch.save(result, os.path.join(out_dir, f"rank{rank}.pt"))


def _mean(results: list[dict], kind: str, key: str) -> float:
    return sum(r[kind]["bytes"].get(key, 0.0) for r in results) / len(results)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--ranks-per-node", type=int, default=2)
    p.add_argument("--config", choices=sorted(CONFIGS), default="small")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    args = p.parse_args()
    world = args.nodes * args.ranks_per_node
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as out_dir:
        torch.multiprocessing.start_processes(
            _worker, args=(world, port, args, out_dir), nprocs=world, start_method="spawn"
        )
        results = [torch.load(os.path.join(out_dir, f"rank{r}.pt"), weights_only=False) for r in range(world)]

    mib = 2**20
    params = results[0]["fsdp"]["param_bytes"]
    print(
        f"FLUX '{args.config}' transformer, {params / mib:.2f} MiB of fp32 parameters; {args.nodes} nodes x "
        f"{args.ranks_per_node} ranks ({args.device}); collective payload per rank in one training step, MiB:"
    )
    print(f"{'collective':<28}{results[0]['fsdp']['mesh']:>22}{results[0]['hsdp']['mesh']:>36}")
    keys = sorted({k for r in results for kind in ("fsdp", "hsdp") for k in r[kind]["bytes"]})
    summary = {"nodes": args.nodes, "ranks_per_node": args.ranks_per_node, "config": args.config, "param_bytes": params}
    for key in keys:
        f, h = _mean(results, "fsdp", key), _mean(results, "hsdp", key)
        print(f"{key:<28}{f / mib:>22.3f}{h / mib:>36.3f}")
        summary[f"fsdp/{key}_bytes"], summary[f"hsdp/{key}_bytes"] = f, h
    f_ag = _mean(results, "fsdp", "all_gather/cross_node")
    h_ag = _mean(results, "hsdp", "all_gather/cross_node")
    summary["allgather_cross_node_bytes_per_step"] = {"fsdp": f_ag, "hsdp": h_ag}
    summary["allgather_cross_node_hsdp_over_fsdp"] = h_ag / f_ag if f_ag else float("nan")
    summary["fsdp_allgather_cross_node_over_param_bytes"] = f_ag / params
    print(
        f"all-gather bytes across nodes per step: fsdp {f_ag / mib:.3f} MiB ({f_ag / params:.2f} x the parameters), "
        f"hsdp {h_ag / mib:.3f} MiB; hsdp / fsdp = {summary['allgather_cross_node_hsdp_over_fsdp']:.3f}"
    )
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
