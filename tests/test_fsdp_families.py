"""FSDP2 through each family's backbone with 2 gloo processes (issue 6): ``Backbone.parallelize`` (the family's
``parallelize_<family>``: fully_shard per block, root last; every rank built on the meta device and filled with its
own shards from the checkpoint),
one full-fine-tuning step sharded equals the unsharded step, and a sharded LoRA run exports an adapter that a fresh
process loads with diffusers' ``load_lora_weights`` and reproduces."""

from __future__ import annotations

import pytest
import torch

from dist_utils import run_distributed
from families import FAMILIES, NAMES

pytestmark = pytest.mark.slow
PROMPTS = ["a red square", "a photo of a blue circle", "a green tree", "a pink car"]


def _step(bb, x, sigma, prompts, lr, adam=False):
    # SGD for the sharded-vs-unsharded comparison: Adam's first step is lr * sign(grad), which turns float noise in
    # near-zero gradients into lr-sized differences
    params = list(bb.trainable_parameters())
    opt = torch.optim.AdamW(params, lr=lr) if adam else torch.optim.SGD(params, lr=lr)
    v = bb.velocity(x, sigma, bb.encode_prompts(prompts))
    (v**2).mean().backward()  # each rank: mean over its half; FSDP averages the halves' gradients
    opt.step()


def _sharded(rank, world, name, x, sigma, export_dir):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor

    fam, mesh = FAMILIES[name], init_device_mesh("cpu", (world,))
    mine = slice(rank, None, world)

    bb = fam.build(finetune="full")
    assert all(p.is_meta for p in bb.transformer.parameters())  # no rank read the whole model (sharded start-up)
    bb.parallelize(mesh)
    n_units = sum(1 for m in bb.transformer.modules() if type(m).__name__.startswith("FSDP"))
    _step(bb, x[mine], sigma[mine], PROMPTS[mine], lr=0.1)
    state = {
        k: (v.full_tensor() if isinstance(v, DTensor) else v).detach().clone()
        for k, v in bb.transformer.state_dict().items()
    }

    lora = fam.build(finetune="lora", lora_rank=4)
    lora.parallelize(mesh)
    _step(lora, x[mine], sigma[mine], PROMPTS[mine], lr=1e-2, adam=True)
    with torch.no_grad():
        v_after = lora.velocity(x, sigma, lora.encode_prompts(PROMPTS))
    lora.save_pretrained(export_dir)
    return {"state": state if rank == 0 else None, "v": v_after, "units": n_units}


def _load_export(rank, world, name, x, sigma, export_dir):
    bb = FAMILIES[name].build(finetune="full")
    bb.pipe.load_lora_weights(export_dir)
    with torch.no_grad():
        return bb.velocity(x, sigma, bb.encode_prompts(PROMPTS))


@pytest.mark.parametrize("name", NAMES)
def test_sharded_step_equals_unsharded_and_sharded_lora_export_loads(name, tmp_path):
    fam = FAMILIES[name]
    ref = fam.build(finetune="full")  # also writes the twin before the ranks start
    g = torch.Generator().manual_seed(0)
    x = ref.initial_noise(4, g)
    sigma = torch.rand(4, generator=g) * 0.9 + 0.05
    with torch.no_grad():
        v_base = ref.velocity(x, sigma, ref.encode_prompts(PROMPTS))
    base_state = {k: v.clone() for k, v in ref.transformer.state_dict().items()}
    _step(ref, x, sigma, PROMPTS, lr=0.1)

    results = run_distributed(_sharded, 2, name, x, sigma, str(tmp_path / "lora"), timeout=600)
    assert results[0]["units"] == len(ref.transformer_blocks()) + 1  # one FSDP unit per block + the root
    moved = 0
    for k, v in ref.transformer.state_dict().items():
        torch.testing.assert_close(results[0]["state"][k], v, rtol=1e-5, atol=1e-6, msg=k)
        moved += int(not torch.equal(v, base_state[k]))
    assert moved > len(base_state) // 2  # the step did train the transformer
    torch.testing.assert_close(results[0]["v"], results[1]["v"])
    assert (tmp_path / "lora" / "pytorch_lora_weights.safetensors").exists()

    loaded = run_distributed(_load_export, 1, name, x, sigma, str(tmp_path / "lora"), timeout=300)[0]
    torch.testing.assert_close(loaded, results[0]["v"], rtol=1e-5, atol=1e-5)
    assert (loaded - v_base).abs().max() > 1e-4  # the trained adapter changed the policy
