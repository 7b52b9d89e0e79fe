"""Sharded start-up (models/sharded_load.py, docs/memory.md#sharded-start-up) against today's path, on every tiny twin
with 2 gloo ranks: every rank builds the transformer on the meta device and reads only its shards from the
safetensors files, and the sharded model, its reference and one trained step are bit-identical to loading the whole
model on each rank and sharding it (the single-process path, then ``fully_shard``). Also: the bf16 reference is within
bf16 tolerance of the fp32 one, and a replicated LoRA base trains the same adapter as a sharded one."""

from __future__ import annotations

import pytest
import torch

from dist_utils import run_distributed
from families import FAMILIES, NAMES

pytestmark = pytest.mark.slow
PROMPTS = ["a red square", "a photo of a blue circle", "a green tree", "a pink car"]


def _full(module) -> dict[str, torch.Tensor]:
    from torch.distributed.tensor import DTensor

    return {
        k: (v.full_tensor() if isinstance(v, DTensor) else v).detach().clone() for k, v in module.state_dict().items()
    }


def _build_and_step(name: str, today: bool, x, sigma, **kwargs) -> dict:
    """Build on this rank (today's path: the whole model, then sharded), take one SGD step on the rank's half."""
    from torch.distributed.device_mesh import init_device_mesh

    import models.sharded_load as sharded_load

    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    enabled = sharded_load.sharded_startup_enabled
    if today:
        sharded_load.sharded_startup_enabled = lambda: False
    torch.manual_seed(0)  # the LoRA adapters are drawn from rank 0's seed on both paths
    try:
        bb = FAMILIES[name].build(**kwargs)
    finally:
        sharded_load.sharded_startup_enabled = enabled
    meta = all(p.is_meta for p in bb.transformer.parameters())
    bb.parallelize(init_device_mesh("cpu", (world,)))
    out = {
        "meta": meta,
        "start": _full(bb.transformer),
        "reference": _full(bb._reference_model) if bb._reference_model is not None else None,
    }
    if bb._reference_model is not None:
        with torch.no_grad(), bb.reference():
            out["v_ref"] = bb.velocity(x, sigma, bb.encode_prompts(PROMPTS))
    mine = slice(rank, None, world)
    opt = torch.optim.SGD(list(bb.trainable_parameters()), lr=0.1)
    (bb.velocity(x[mine], sigma[mine], bb.encode_prompts(PROMPTS[mine])) ** 2).mean().backward()
    opt.step()
    out["trained"] = _full(bb.transformer)
    return out


def _ranks(rank, world, x, sigma):
    results = {}
    for name in NAMES:
        full = dict(finetune="full", keep_reference=True)
        lora = dict(finetune="lora", lora_rank=4)
        results[name] = {
            "today_full": _build_and_step(name, True, x[name], sigma, reference_dtype="float32", **full),
            "new_full": _build_and_step(name, False, x[name], sigma, reference_dtype="float32", **full),
            "new_full_bf16": _build_and_step(name, False, x[name], sigma, reference_dtype="bfloat16", **full),
            "today_lora": _build_and_step(name, True, x[name], sigma, **lora),
            "new_lora": _build_and_step(name, False, x[name], sigma, **lora),
            "new_lora_replicated": _build_and_step(name, False, x[name], sigma, base_sharding="replicate", **lora),
        }
    return results if rank == 0 else None


def _assert_identical(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k


def test_sharded_startup_equals_todays_path_on_every_family():
    g = torch.Generator().manual_seed(0)
    x = {}
    for name in NAMES:
        bb = FAMILIES[name].build(finetune="full")  # writes the twin before the ranks start
        x[name] = bb.initial_noise(4, g)
    sigma = torch.rand(4, generator=g) * 0.9 + 0.05
    v_ref_one_process = {}  # the bf16 reference in one process (unsharded, autocast to bf16)
    for name in NAMES:
        bb = FAMILIES[name].build(finetune="full", keep_reference=True, reference_dtype="bfloat16")
        with torch.no_grad(), bb.reference():
            v_ref_one_process[name] = bb.velocity(x[name], sigma, bb.encode_prompts(PROMPTS))
    results = run_distributed(_ranks, 2, x, sigma, timeout=1500)[0]
    for name, r in results.items():
        assert r["new_full"]["meta"] and r["new_lora"]["meta"] and not r["today_full"]["meta"], name
        for mode in ("full", "lora"):
            today, new = r[f"today_{mode}"], r[f"new_{mode}"]
            _assert_identical(today["start"], new["start"])  # loaded shards: bit for bit
            _assert_identical(today["trained"], new["trained"])  # and one trained step
        _assert_identical(r["today_full"]["reference"], r["new_full"]["reference"])  # reference_dtype=float32
        assert all(v.dtype == torch.float32 for v in r["new_full"]["reference"].values())
        bf16 = r["new_full_bf16"]
        assert any(v.dtype == torch.bfloat16 for v in bf16["reference"].values())
        v32, v16 = r["new_full"]["v_ref"], bf16["v_ref"]
        rel = float((v16 - v32).norm() / v32.norm())
        assert 0 < rel < 2e-2, (name, rel)  # bf16 weights: ~3 significant digits
        # sharded or not, the bf16 reference computes in bf16 (models/common.py _autocast)
        torch.testing.assert_close(v16, v_ref_one_process[name], rtol=1e-5, atol=1e-6, msg=name)
        replicated = r["new_lora_replicated"]["trained"]
        for k, v in r["new_lora"]["trained"].items():
            torch.testing.assert_close(replicated[k], v, rtol=1e-5, atol=1e-6, msg=f"{name} {k}")
        moved = [k for k in replicated if "lora_B" in k and not torch.equal(replicated[k], r["new_lora"]["start"][k])]
        assert moved, name  # the step trained the adapters
