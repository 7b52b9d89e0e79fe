"""Optional and last: compiled vs eager FLUX blocks. FLUX.1-dev at full width with one double-stream and one
single-stream block (bf16 weights, no checkpointing), forward + backward at the batched size, eager, then with each
block compiled in place (``nn.Module.compile``, per block as torchtitan's ``apply_compile`` does before sharding).
Reports the first compiled call's time (the compilation), the compiled pass time, the speedup eager / compiled, and
the relative difference of the two forwards' outputs (bf16 rounding, a few 1e-3)."""

from __future__ import annotations

import time
from dataclasses import replace

import torch

from gpu_measure.profile import Check
from gpu_measure.record import Recorder
from gpu_measure.timing import free_memory, measure_pass, timed

SECTION = "compile"


def section_compile(chk: Check, rec: Recorder, allowance: float) -> None:
    from models.real_transformers import FAMILIES, velocity

    end = time.monotonic() + allowance
    device, ac, fam = chk.device, chk.compute_dtype, FAMILIES["flux"]
    cfg = {**fam.transformer_config(chk.profile.tiny), "num_layers": 1, "num_single_layers": 1}
    shape = fam.smoke_shape if chk.profile.tiny else fam.shape
    batch = chk.profile.batched["flux"]
    shape = replace(shape, rows=shape.rows * batch)
    backend = chk.profile.compile_backend
    free_memory(device)
    model = fam.build(cfg, device, chk.compute_dtype)
    model.train()
    inputs = fam.call_inputs(cfg, shape, device, ac)

    def forward_backward():
        for p in model.parameters():
            p.grad = None
        v = velocity(model, inputs, ac)
        v.square().mean().backward()
        return v.detach()

    with torch.no_grad():
        reference = velocity(model, inputs, ac)
    common = {"batch": batch, "rows": shape.rows, "blocks": "1 double + 1 single", "backend": backend}
    eager = measure_pass(device, forward_backward, chk.reps, (end - time.monotonic()) / 4, flops=False)
    eager.pop("out")
    rec.write(SECTION, f"flux 1+1 blocks b{batch} fwd+bwd eager", **common, **eager)

    for block in [*model.transformer_blocks, *model.single_transformer_blocks]:
        block.compile(backend=backend)
    compile_s, _ = timed(device, forward_backward)  # the first call compiles forward and backward
    with torch.no_grad():
        compiled_out = velocity(model, inputs, ac)
    rel_diff = float((compiled_out - reference).norm() / reference.norm())
    compiled = measure_pass(device, forward_backward, chk.reps, end - time.monotonic() - 1.0, flops=False)
    compiled.pop("out")
    speedup = eager["seconds"] / compiled["seconds"]
    rec.write(
        SECTION,
        f"flux 1+1 blocks b{batch} fwd+bwd compiled",
        **common,
        **compiled,
        compile_s=compile_s,
        speedup=speedup,
        rel_diff_vs_eager=rel_diff,
        value=f"{speedup:.2f}x eager, compiled in {compile_s:.0f} s",
    )
    del model, inputs, reference, compiled_out
    free_memory(device)
