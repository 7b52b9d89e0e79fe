"""JAGG under FSDP2 with 2 gloo processes (docs/methods/jagg.md#under-fsdp2, docs/development.md#fsdp2-on-the-cpu).

The two endpoints of a JAGG group run as one batched forward, so its single backward all-gathers every sharded block
exactly once; an exact group of W steps all-gathers each block W times in backward. The sharded JAGG gradient equals
the single-process one, and the diagnostic mode's cosine works on sharded (DTensor) gradients.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
from omegaconf import OmegaConf

from conftest import compose
from dist_utils import run_distributed

pytestmark = pytest.mark.slow

W = 4
SAMPLES = 4  # 2 per rank


def _build(method_cfg, model_cfg):
    """JAGG on the tiny FLUX twin from their typed configs."""
    from hydra.utils import get_class

    from methods.jagg import JAGG

    torch.manual_seed(0)
    return JAGG(method_cfg, get_class(model_cfg._target_)(model_cfg))


def _group_args(rollout, samples, update_size):
    t = rollout.train_steps.shape[1]
    return rollout, samples, rollout.train_steps[samples][:, :W], update_size * t, {}, 1.0 / t


def _full_grads(module) -> dict[str, torch.Tensor]:
    out = {}
    for k, p in module.named_parameters():
        if p.grad is not None:
            g = p.grad
            out[k] = (g.full_tensor() if hasattr(g, "full_tensor") else g).detach().clone()
    return out


def _count_all_gathers():
    """Count real all-gathers per FSDP group and phase by wrapping ``FSDPParamGroup.unshard``
    (docs/development.md#fsdp2-on-the-cpu)."""
    from torch.distributed.fsdp._fully_shard._fsdp_common import TrainingState
    from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup

    counts: Counter = Counter()
    original = FSDPParamGroup.unshard

    def unshard(self, async_op: bool = False):
        pending = self._all_gather_result is not None or self.is_unsharded
        original(self, async_op)
        if not pending and self._all_gather_result is not None:
            phase = "backward" if self._training_state == TrainingState.PRE_BACKWARD else "forward"
            counts[(self._module_fqn or "root", phase)] += 1

    FSDPParamGroup.unshard = unshard
    return counts


def _sharded(rank, world, method_cfg, model_cfg, rollout):
    from torch.distributed.device_mesh import init_device_mesh

    method = _build(method_cfg, model_cfg)
    method.backbone.parallelize(init_device_mesh("cpu", (world,)))
    net = method.backbone.transformer
    counts = _count_all_gathers()
    mine = torch.arange(SAMPLES)[rank::world]  # each rank trains its half of the micro-batch
    results = {}
    for name, route in (("jagg", method.jagg_group_backward), ("exact", method.exact_group_backward)):
        counts.clear()
        net.zero_grad(set_to_none=True)
        route(*_group_args(rollout, mine, len(mine)))
        results[name] = {"counts": dict(counts), "grads": _full_grads(net)}
    net.zero_grad(set_to_none=True)
    method._diagnose_group(*_group_args(rollout, mine, len(mine)), group=0)
    results["diagnostics"] = method.step_metrics()
    return results


def test_one_all_gather_per_block_in_a_jagg_backward_and_the_sharded_gradient_matches():
    old = torch.get_num_threads()
    torch.set_num_threads(1)  # as the ranks (tiny model, shared CPU)
    try:
        _check_jagg_under_fsdp()
    finally:
        torch.set_num_threads(old)


def _check_jagg_under_fsdp():
    overrides = ["method=jagg", "method.sampling_steps=9", f"method.group_size={SAMPLES}", "method.prompts_per_step=1"]
    cfg = compose(overrides)
    method_cfg, model_cfg = OmegaConf.to_object(cfg.method), OmegaConf.to_object(cfg.model)
    method = _build(method_cfg, model_cfg)
    gen = torch.Generator().manual_seed(0)
    rollout = method.rollout(["a red square"], gen)
    rollout.rewards = torch.rand(SAMPLES, generator=gen)
    method.prepare_update(rollout)
    assert method.layout.is_jagg(0)

    everything = torch.arange(SAMPLES)
    method.backbone.transformer.zero_grad(set_to_none=True)
    method.jagg_group_backward(*_group_args(rollout, everything, SAMPLES))
    single = {k: p.grad.clone() for k, p in method.backbone.transformer.named_parameters() if p.grad is not None}
    method.backbone.transformer.zero_grad(set_to_none=True)
    method._diagnose_group(*_group_args(rollout, everything, SAMPLES), group=0)
    single_diag = method.step_metrics()

    ranks = run_distributed(_sharded, 2, method_cfg, model_cfg, rollout)
    per_rank, ub = SAMPLES // 2, int(method_cfg.update_batch)
    n_blocks = len(method.backbone.transformer.transformer_blocks) + len(
        method.backbone.transformer.single_transformer_blocks
    )
    for res in ranks:
        jagg, exact = res["jagg"]["counts"], res["exact"]["counts"]
        blocks = sorted({fqn for fqn, _ in jagg if "blocks." in fqn})
        assert len(blocks) == n_blocks
        # rows packed method.update_batch per call (docs/performance.md#batched-trained-steps): JAGG's endpoints
        # come update_batch // 2 samples per call (both endpoints of a sample in one call), then its W - 2
        # intermediate forwards and the exact route's W steps fill calls of update_batch rows
        endpoint_calls = math.ceil(per_rank / (ub // 2))
        assert all(jagg[(b, "backward")] == endpoint_calls for b in blocks), jagg  # one backward per endpoint call
        jagg_forwards = endpoint_calls + math.ceil((W - 2) * per_rank / ub)
        assert all(jagg[(b, "forward")] == jagg_forwards for b in blocks), jagg
        assert all(exact[(b, "backward")] == math.ceil(W * per_rank / ub) for b in blocks), exact
        assert all(exact[(b, "forward")] == math.ceil(W * per_rank / ub) for b in blocks), exact
        assert res["jagg"]["grads"].keys() == single.keys()
        for k, v in single.items():
            torch.testing.assert_close(res["jagg"]["grads"][k], v, rtol=1e-4, atol=1e-7, msg=k)
        for k, v in single_diag.items():
            assert res["diagnostics"][k] == pytest.approx(v, rel=1e-3, abs=1e-5), k
