"""FSDP2 on the tiny FLUX twin with 2 gloo processes: a sharded training step equals the unsharded one."""

from __future__ import annotations

import pytest
import torch

from dist_utils import run_distributed

pytestmark = pytest.mark.slow


def _loss(transformer, rank_batch):
    x, t, enc, pooled, txt_ids, img_ids, guidance = rank_batch
    out = transformer(
        hidden_states=x,
        timestep=t,
        encoder_hidden_states=enc,
        pooled_projections=pooled,
        txt_ids=txt_ids,
        img_ids=img_ids,
        guidance=guidance,
        return_dict=False,
    )[0]
    return (out**2).mean()


def _batch(n, seed):
    from models.tiny_flux import TRANSFORMER

    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(n, 64, TRANSFORMER["in_channels"], generator=g),
        torch.rand(n, generator=g),
        torch.randn(n, 8, TRANSFORMER["joint_attention_dim"], generator=g),
        torch.randn(n, TRANSFORMER["pooled_projection_dim"], generator=g),
        torch.zeros(8, 3),
        torch.stack(torch.meshgrid(torch.zeros(1), torch.arange(8.0), torch.arange(8.0), indexing="ij"), -1).reshape(
            64, 3
        ),
        torch.full((n,), 3.5),
    )


def _sharded_step(rank, world, batch):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor

    from models.flux import FluxBackbone
    from models.tiny_flux import build_tiny_flux_pipeline

    model = build_tiny_flux_pipeline(pretrain_steps=0).transformer
    FluxBackbone.shard_transformer(model, init_device_mesh("cpu", (world,)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    mine = tuple(b[rank::world] if torch.is_tensor(b) and b.shape[0] == batch[0].shape[0] else b for b in batch)
    _loss(model, mine).backward()  # each rank: mean over its half; FSDP averages the two halves
    opt.step()
    return {
        k: (v.full_tensor() if isinstance(v, DTensor) else v).detach().clone() for k, v in model.state_dict().items()
    }


def test_sharded_step_equals_unsharded_step():
    from models.tiny_flux import build_tiny_flux_pipeline

    batch = _batch(4, 0)
    ref = build_tiny_flux_pipeline(pretrain_steps=0).transformer
    opt = torch.optim.AdamW(ref.parameters(), lr=1e-3)
    _loss(ref, batch).backward()
    opt.step()
    sharded = run_distributed(_sharded_step, 2, batch)
    for state in sharded:
        for k, v in ref.state_dict().items():
            torch.testing.assert_close(state[k], v, rtol=1e-5, atol=1e-6, msg=k)
