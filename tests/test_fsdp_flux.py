"""FSDP2 on the tiny FLUX twin with 2 gloo processes: a sharded training step equals the unsharded one.

What the claim is about: each rank's backward over its half of the batch, reduce-scattered by FSDP2, gives every
parameter the gradient of the whole batch, and the optimizer applied to the shards updates exactly those elements.
So the test compares (1) the gradients before the optimizer and (2) the parameters after one plain SGD step.

Why not the parameters after an AdamW step: AdamW's first step is ``lr * g / (|g| + eps)``, whose derivative in
``g`` is up to ``lr / eps`` (1e5 at lr 1e-3, eps 1e-8). Summing a batch in two halves instead of one changes fp32
gradients by rounding (measured: at most 4e-7 of each tensor's largest gradient), and on the twin's timestep
embedder, whose smallest gradients are ~3e-8, i.e. comparable to eps, AdamW turned that rounding into parameter
differences above 1e-6: a failure of the comparison, not of FSDP2.

Tolerance: fp32 reduction-order rounding scales with the magnitudes summed, so each tensor is compared with
``rtol=1e-5`` and ``atol=1e-5 * max|g|`` of that tensor (25x the measured worst case). A real divergence of the
FSDP2 path is far larger: a reduction that sums instead of averaging doubles every gradient, and
``test_the_comparison_catches_a_broken_reduction`` checks that the same comparison fails on it.
"""

from __future__ import annotations

import pytest
import torch

from dist_utils import run_distributed

pytestmark = pytest.mark.slow

LR = 1e-2
RTOL = 1e-5  # relative to each element, and (as atol) to the tensor's largest magnitude; see the docstring


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


def _full(t):
    from torch.distributed.tensor import DTensor

    return (t.full_tensor() if isinstance(t, DTensor) else t).detach().clone()


def _sharded_step(rank, world, batch, break_reduction):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FSDPModule

    from models.flux import FluxBackbone
    from models.tiny_flux import build_tiny_flux_pipeline

    model = build_tiny_flux_pipeline(pretrain_steps=0).transformer
    FluxBackbone.shard_transformer(model, init_device_mesh("cpu", (world,)))
    if break_reduction:  # the negative control: sum the ranks' gradients instead of averaging them
        for module in model.modules():
            if isinstance(module, FSDPModule):
                module.set_gradient_divide_factor(1.0)
                module.set_force_sum_reduction_for_comms(True)  # gloo has no PREMUL_SUM
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    mine = tuple(b[rank::world] if torch.is_tensor(b) and b.shape[0] == batch[0].shape[0] else b for b in batch)
    _loss(model, mine).backward()  # each rank: mean over its half; FSDP averages the two halves
    grads = {k: _full(p.grad) for k, p in model.named_parameters()}
    opt.step()
    return grads, {k: _full(v) for k, v in model.state_dict().items()}


def _reference(batch):
    from models.tiny_flux import build_tiny_flux_pipeline

    ref = build_tiny_flux_pipeline(pretrain_steps=0).transformer
    opt = torch.optim.SGD(ref.parameters(), lr=LR)
    _loss(ref, batch).backward()
    grads = {k: p.grad.detach().clone() for k, p in ref.named_parameters()}
    opt.step()
    return grads, {k: v.detach().clone() for k, v in ref.state_dict().items()}


def _assert_same(actual, expected, what, atol_of):
    assert actual.keys() == expected.keys()
    for k, v in expected.items():
        torch.testing.assert_close(actual[k], v, rtol=RTOL, atol=atol_of(k), msg=f"{what} {k}")


def _assert_same_step(sharded, reference):
    ref_grads, ref_params = reference
    scale = {k: g.abs().max().item() for k, g in ref_grads.items()}
    for grads, params in sharded:
        _assert_same(grads, ref_grads, "gradient of", lambda k: RTOL * scale[k])
        # after the step w - LR * g: the weight's own rounding is inside rtol, the gradients' within LR * their atol
        _assert_same(params, ref_params, "parameter", lambda k: LR * RTOL * scale.get(k, 0.0))


def test_sharded_step_equals_unsharded_step():
    batch = _batch(4, 0)
    _assert_same_step(run_distributed(_sharded_step, 2, batch, False), _reference(batch))


def test_the_comparison_catches_a_broken_reduction():
    batch = _batch(4, 0)
    with pytest.raises(AssertionError, match="gradient of"):
        _assert_same_step(run_distributed(_sharded_step, 2, batch, True), _reference(batch))
