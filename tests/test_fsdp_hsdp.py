"""cluster.mesh=fsdp|hsdp (launcher/cluster/mesh.py): the mesh shapes and their config errors, and, on 4 gloo processes laid
out as 2 nodes x 2 ranks, one full-fine-tuning step of the tiny FLUX twin through its backbone's ``parallelize``
(rank 0's weights broadcast into the other ranks' shards) on the 1-D mesh and on the 2-D (replicate x shard) mesh:
gradients, the trainer's global gradient norm and the updated weights equal the single-process step, and a DCP
checkpoint on that mesh restores the shards and optimizer state (resume); and scripts/bench_mesh.py's count of
the collectives: no parameter all-gather crosses nodes under HSDP."""

from __future__ import annotations

import os

import pytest
import torch

from conftest import compose
from dist_utils import run_distributed
from families import FAMILIES
from launcher.cluster.mesh import mesh_shape
from rewardflow.errors import ConfigError

PROMPTS = ["a red square", "a photo of a blue circle", "a green tree", "a pink car"]


def test_mesh_shapes():
    assert mesh_shape("fsdp", 16, 8) == (16,)
    assert mesh_shape("hsdp", 16, 8) == (2, 8)  # default shard group: one node
    assert mesh_shape("hsdp", 96, 8, shard_size=16) == (6, 16)
    assert mesh_shape("hsdp", 8, 8) == (1, 8)  # one node: HSDP degenerates to FSDP


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["cluster.mesh=ddp"], "cluster.mesh must be one of fsdp, hsdp"),
        (["cluster.mesh=hsdp", "cluster.shard_size=3"], "cluster.shard_size=3 must divide the 16 ranks"),
        (["cluster.mesh=hsdp", "cluster.shard_size=0"], "cluster.shard_size=0 must divide"),
        (["cluster.mesh=fsdp", "cluster.shard_size=4"], "cluster.shard_size=4 applies to cluster.mesh=hsdp only"),
    ],
)
def test_bad_mesh_config_fails_before_anything_is_built(overrides, key):
    from launcher.validate import validate

    cfg = compose(["cluster=slurm", "cluster.nodes=2", "cluster.gpus_per_node=8", *overrides])
    with pytest.raises(ConfigError, match=key.replace("(", r"\(")) as err:
        validate(cfg)
    assert "Fix:" in str(err.value)


def _grads_norm_weights(bb, x, sigma, prompts):
    from torch.distributed.tensor import DTensor

    from launcher.train.update_loop import UpdateLoop

    def full(t):
        return (t.full_tensor() if isinstance(t, DTensor) else t).detach().clone()

    params = dict(bb.transformer.named_parameters())
    v = bb.velocity(x, sigma, bb.encode_prompts(prompts))
    (v**2).mean().backward()  # each rank: mean over its samples; FSDP averages over all ranks
    grads = {k: full(p.grad) for k, p in params.items()}
    # the update loop's own global norm (over every rank's shards), without clipping
    norm = float(UpdateLoop(None, None, list(params.values()), max_grad_norm=0.0).grad_norm())
    opt = torch.optim.SGD(params.values(), lr=0.1, momentum=0.9)  # momentum: optimizer state to checkpoint
    opt.step()  # (the first step is plain SGD)
    return grads, norm, {k: full(p) for k, p in params.items()}, opt


def _sharded(rank, world, x, sigma, ckpt_dir):
    from omegaconf import OmegaConf
    from torch.distributed.tensor import Replicate, Shard

    from launcher.checkpoint.manager import CheckpointManager
    from launcher.cluster.mesh import build_mesh
    from rewardflow.distributed import current_world

    os.environ["LOCAL_WORLD_SIZE"] = "2"  # as submitit exports it for 2 nodes x 2 tasks
    mine = slice(rank, None, world)
    out = {}
    for kind in ("fsdp", "hsdp"):
        mesh = build_mesh(OmegaConf.create({"mesh": kind, "shard_size": None}), current_world(), "cpu")
        bb = FAMILIES["tiny_flux"].build(finetune="full")
        bb.parallelize(mesh)
        placements = {p.placements for p in bb.transformer.parameters()}
        grads, norm, weights, opt = _grads_norm_weights(bb, x[mine], sigma[mine], PROMPTS[mine])
        shard_group = mesh["shard"].mesh.tolist()
        out[kind] = dict(
            grads=grads,
            norm=norm,
            weights=weights if rank == 0 else None,
            placements=placements,
            shard_group=shard_group,
            shape=tuple(mesh.shape),
        )
        # a checkpoint on this mesh restores every rank's shards and optimizer state into a fresh model (resume)
        checkpoints = CheckpointManager(os.path.join(ckpt_dir, kind), current_world())
        saved = checkpoints.save(0, bb.transformer, opt, meta={})
        fresh = FAMILIES["tiny_flux"].build(finetune="full")
        fresh.parallelize(mesh)
        fresh_opt = torch.optim.SGD(fresh.transformer.parameters(), lr=0.1, momentum=0.9)
        checkpoints.load(saved, fresh.transformer, fresh_opt)
        pairs = list(zip(bb.transformer.parameters(), fresh.transformer.parameters()))
        momentum = [
            (opt.state[a]["momentum_buffer"], fresh_opt.state[b]["momentum_buffer"]) for a, b in pairs if a in opt.state
        ]
        out[kind]["resumed"] = len(momentum) == len(opt.state) == len(fresh_opt.state) > 0 and all(
            torch.equal(a.to_local(), b.to_local()) for a, b in pairs + momentum
        )
    assert out["hsdp"]["placements"] == {(Replicate(), Shard(0))}
    assert out["fsdp"]["placements"] == {(Shard(0),)}
    return out


@pytest.mark.slow
def test_fsdp_and_hsdp_steps_equal_the_single_process_step(tmp_path):
    fam = FAMILIES["tiny_flux"]
    ref = fam.build(finetune="full")  # also writes the twin before the ranks start
    g = torch.Generator().manual_seed(0)
    x = ref.initial_noise(4, g)
    sigma = torch.rand(4, generator=g) * 0.9 + 0.05
    ref_grads, ref_norm, ref_weights, _ = _grads_norm_weights(ref, x, sigma, PROMPTS)
    assert ref_norm > 0

    results = run_distributed(_sharded, 4, x, sigma, str(tmp_path), timeout=900)
    assert [r["hsdp"]["shard_group"] for r in results] == [[0, 1], [0, 1], [2, 3], [2, 3]]  # a group = a node
    assert results[0]["hsdp"]["shape"] == (2, 2) and results[0]["fsdp"]["shape"] == (4,)
    for kind in ("fsdp", "hsdp"):
        assert all(r[kind]["resumed"] for r in results), kind
        for r in results:
            assert r[kind]["norm"] == pytest.approx(ref_norm, rel=1e-5), kind
            for k, v in ref_grads.items():
                torch.testing.assert_close(r[kind]["grads"][k], v, rtol=1e-5, atol=1e-7, msg=f"{kind} grad {k}")
        for k, v in ref_weights.items():
            torch.testing.assert_close(
                results[0][kind]["weights"][k], v, rtol=1e-5, atol=1e-6, msg=f"{kind} weight {k}"
            )


@pytest.mark.slow
def test_bench_mesh_measures_no_parameter_all_gather_across_nodes_under_hsdp():
    import json
    import subprocess
    import sys

    from conftest import ROOT

    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench_mesh.py"), "--config", "tiny"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    params = res["param_bytes"]
    # 1-D mesh over 2 nodes: every block gathered across nodes in the forward and again in the backward
    assert res["allgather_cross_node_bytes_per_step"] == {"fsdp": 2 * params, "hsdp": 0.0}
    assert res["hsdp/all_gather/in_node_bytes"] == 2 * params
    # gradients: HSDP all-reduces a 1/shard_size slice across nodes, FSDP reduce-scatters all of them across nodes
    assert res["hsdp/all_reduce/cross_node_bytes"] == params / 2
    assert res["fsdp/reduce_scatter/cross_node_bytes"] == params
