"""What FSDP2 costs on one rank: FLUX.1-dev at full width and depth with the project's GPU precision (fp32 master
weights, bf16 compute, fp32 gradient reduction: ``models/parallelize.py``) and activation checkpointing, one
forward + backward at batch 1, three ways on the same weights:

1. ``plain``: unsharded, under bf16 autocast (autocast casts each weight per use);
2. ``fsdp reshard on``: ``FluxBackbone.shard_transformer`` (``fully_shard`` per block, then the root), parameters
   freed after the forward and all-gathered again for the backward;
3. ``fsdp reshard off``: the same model after ``set_reshard_after_forward(False)``, parameters kept from the forward
   to the backward (more memory, one all-gather per block less).

A 1-rank process group (NCCL on the GPU, gloo on the CPU) moves no bytes between devices, so the ratios to
``plain`` are FSDP2's own overhead: the fp32 -> bf16 casts into the all-gather buffer, the copies out of it, the
gradient reduce-scatter copies and the hooks around every block.
"""

from __future__ import annotations

import tempfile
import time

import torch

from gpu_measure.profile import Check
from gpu_measure.record import Recorder
from gpu_measure.timing import first_line, free_memory, measure_pass, reset_peak, timed
from rewardflow.dtypes import torch_dtype

SECTION = "fsdp"


def section_fsdp(chk: Check, rec: Recorder, allowance: float) -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from models.flux import FluxBackbone
    from models.parallelize import mixed_precision_policy
    from models.real_transformers import FAMILIES, velocity

    end = time.monotonic() + allowance
    device, fam = chk.device, FAMILIES["flux"]
    cfg = fam.transformer_config(chk.profile.tiny)
    shape = fam.smoke_shape if chk.profile.tiny else fam.shape
    compute = torch_dtype("auto", device.type)  # what the FLUX backbone autocasts to on this device
    backend = "nccl" if device.type == "cuda" else "gloo"
    policy = mixed_precision_policy(device.type)
    common = {
        "backend": backend,
        "world_size": 1,
        "double_blocks": cfg["num_layers"],
        "single_blocks": cfg["num_single_layers"],
        "rows": shape.rows,
        "checkpointing": True,
        "autocast": str(compute).removeprefix("torch."),
        "param_dtype": str(policy.param_dtype or torch.float32).removeprefix("torch."),
        "reduce_dtype": str(policy.reduce_dtype or torch.float32).removeprefix("torch."),
    }
    free_memory(device)
    reset_peak(device)
    with tempfile.TemporaryDirectory() as tmp:
        extra = {"device_id": device} if backend == "nccl" else {}
        dist.init_process_group(backend, init_method=f"file://{tmp}/rendezvous", rank=0, world_size=1, **extra)
        try:
            mesh = init_device_mesh(device.type, (1,))
            build_s, model = timed(device, lambda: fam.build(cfg, device))  # fp32 master weights
            model.enable_gradient_checkpointing()
            model.train()
            inputs = fam.call_inputs(cfg, shape, device, compute)

            def forward_backward():
                for p in model.parameters():
                    p.grad = None
                v = velocity(model, inputs, compute)
                v.square().mean().backward()
                return v.detach()

            steps = ("plain", "fsdp reshard on", "fsdp reshard off")
            plain_s = None
            for i, step in enumerate(steps):
                if step == "fsdp reshard on":
                    shard_s, _ = timed(
                        device,
                        lambda: FluxBackbone.shard_transformer(
                            model, mesh, mp_policy=policy, reshard_after_forward=True, activation_checkpointing=True
                        ),
                    )
                    common["shard_s"] = round(shard_s, 3)
                elif step == "fsdp reshard off":
                    model.set_reshard_after_forward(False)
                budget = (end - time.monotonic()) / (len(steps) - i)
                try:
                    m = measure_pass(device, forward_backward, chk.reps, budget, flops=False)
                except torch.cuda.OutOfMemoryError as e:
                    m = {"error": first_line(e)}
                for p in model.parameters():
                    p.grad = None
                free_memory(device, collect="error" in m)
                if "error" in m:
                    rec.write(SECTION, f"flux b1 fwd+bwd {step}", status="oom", **common, **m)
                    continue
                out = m.pop("out")
                finite = bool(torch.isfinite(out).all())
                del out
                plain_s = m["seconds"] if step == "plain" else plain_s
                ratio = None if plain_s is None or step == "plain" else m["seconds"] / plain_s
                rec.write(
                    SECTION,
                    f"flux b1 fwd+bwd {step}",
                    **common,
                    **m,
                    out_finite=finite,
                    build_s=build_s,
                    ratio_to_plain=ratio,
                    value="" if ratio is None else f"{ratio:.2f}x plain",
                )
            del model, inputs
        finally:
            dist.destroy_process_group()
    free_memory(device)
