"""Each family's transformer alone, at its published width and depth with random bf16 weights
(``models/real_transformers.py`` holds the configs and their sources), called as its adapter calls it (synthetic
text states, true CFG as 2 rows per sample where the family uses it) under bf16 autocast.

Per family, in this order (a family stopped by its deadline keeps the lines written so far): at batch 1, forward,
forward + backward with gradient checkpointing off, then on (what the real model configs run); at the batched size
(``Profile.batched``: samples per call, as a batched update would stack them), forward, forward + backward with
checkpointing on, then off. Memory permitting: an out-of-memory is recorded as ``status: oom`` and the family goes
on.

FLOPs are counted by ``FlopCounterMode`` in each measurement's warm-up call: ``executed_tflop`` is what ran
(checkpointing recomputes each block's forward), ``model_tflop`` the work of the pass itself: the count without
checkpointing, at the same batch or else at batch 1 times the batch (every op works row by row, so FLOPs grow
linearly with the rows), or, when neither ran, the checkpointed count less one forward (the embedders are not
recomputed: an underestimate by their share, negligible at published sizes). ``tflops`` is executed FLOPs per
second, ``mfu`` model FLOPs per second over the measured matmul ceiling.
"""

from __future__ import annotations

import time
from dataclasses import replace

import torch

from gpu_measure.guard import run_guarded
from gpu_measure.profile import FAMILY_WEIGHTS, Check
from gpu_measure.record import Recorder
from gpu_measure.timing import first_line, free_memory, measure_pass, reset_peak, timed

SECTION = "families"


def ceiling_tflops(chk: Check) -> float:
    """The matmul ceiling of this run, measured now if the ``ceilings`` section did not run."""
    if chk.ceiling_tflops is None:
        from gpu_measure.ceilings import matmul_tflops

        chk.ceiling_tflops = matmul_tflops(chk.device, chk.profile.matmul_n)
    return chk.ceiling_tflops


def model_flops(
    kind: str,
    checkpointing: bool | None,
    batch: int,
    executed: float,
    forward: dict[int, float],
    fwd_bwd: dict[int, float],
) -> float | None:
    """The pass's own TFLOPs (module docstring), remembering the counts later measurements derive theirs from."""
    if kind == "fwd":
        forward[batch] = executed
        return executed
    if not checkpointing:
        fwd_bwd[batch] = executed
        return executed
    if batch in fwd_bwd:
        return fwd_bwd[batch]
    if 1 in fwd_bwd:
        return fwd_bwd[1] * batch
    return executed - forward[batch] if batch in forward else None


def measure_family(chk: Check, rec: Recorder, name: str, allowance: float) -> None:
    from models.real_transformers import FAMILIES, velocity, with_frames

    end = time.monotonic() + allowance
    fam, device, ac = FAMILIES[name], chk.device, chk.compute_dtype
    cfg = fam.transformer_config(chk.profile.tiny)
    shape = fam.smoke_shape if chk.profile.tiny else fam.shape
    if name == "wan2.1" and chk.wan_frames and not chk.profile.tiny:
        shape = with_frames(shape, chk.wan_frames)
    batched = chk.profile.batched[name]

    free_memory(device)
    reset_peak(device)
    build_s, model = timed(device, lambda: fam.build(cfg, device, chk.compute_dtype))
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    rec.write(
        SECTION,
        f"{name} build",
        family=name,
        seconds=build_s,
        params_b=sum(p.numel() for p in params) / 1e9,
        params_gib=sum(p.numel() * p.element_size() for p in params) / 2**30,
        param_dtype=str(params[0].dtype).removeprefix("torch."),
        autocast=str(ac).removeprefix("torch."),
        image_tokens=fam.image_tokens(cfg, shape),
        text_tokens=shape.text_tokens,
        rows_per_sample=shape.rows,
        height=shape.height,
        width=shape.width,
        frames=shape.frames,
        value=f"{sum(p.numel() for p in params) / 1e9:.3g} B params, batched = {batched} samples",
    )

    inputs: dict[int, dict] = {}
    forward_tflop: dict[int, float] = {}
    backward_model_tflop: dict[int, float] = {}  # forward + backward counted without checkpointing

    def call_inputs(batch: int) -> dict:
        if batch not in inputs:
            inputs[batch] = fam.call_inputs(cfg, replace(shape, rows=shape.rows * batch), device, ac)
        return inputs[batch]

    def clear_grads() -> None:
        for p in params:
            p.grad = None

    plan = [
        (1, "fwd", None),
        (1, "fwd_bwd", False),
        (1, "fwd_bwd", True),
        (batched, "fwd", None),
        (batched, "fwd_bwd", True),
        (batched, "fwd_bwd", False),
    ]
    for i, (batch, kind, checkpointing) in enumerate(plan):
        inp = call_inputs(batch)
        if checkpointing:
            model.enable_gradient_checkpointing()
        elif checkpointing is False:
            model.disable_gradient_checkpointing()

        def forward():
            with torch.no_grad():
                return velocity(model, inp, ac)

        def forward_backward():
            clear_grads()
            v = velocity(model, inp, ac)
            v.square().mean().backward()
            return v.detach()

        label = f"{name} b{batch} {'fwd' if kind == 'fwd' else 'fwd+bwd'}" + (
            "" if checkpointing is None else (" ckpt" if checkpointing else " no-ckpt")
        )
        line = {
            "family": name,
            "batch": batch,
            "rows": shape.rows * batch,
            "pass": kind,
            "checkpointing": checkpointing,
        }
        budget = (end - time.monotonic()) / (len(plan) - i)
        status, oom = "ok", None
        try:
            m = measure_pass(device, forward if kind == "fwd" else forward_backward, chk.reps, budget)
        except torch.cuda.OutOfMemoryError as e:  # recorded; the frames holding the attempt go with `e`
            status, oom, m = "oom", first_line(e), {}
        if m:
            out = m.pop("out")
            m["out_finite"] = bool(torch.isfinite(out).all())
            if kind == "fwd_bwd":
                m["grads_finite"] = all(bool(torch.isfinite(p.grad).all()) for p in params if p.grad is not None)
            del out
        clear_grads()
        free_memory(device, collect=status == "oom")
        if status == "oom":
            rec.write(SECTION, label, status="oom", error=oom, **line)
            continue
        seconds, executed = m["seconds"], m["executed_tflop"]
        model_tflop = model_flops(kind, checkpointing, batch, executed, forward_tflop, backward_model_tflop)
        tflops = executed / seconds
        mfu = None if model_tflop is None else model_tflop / seconds / ceiling_tflops(chk)
        rec.write(
            SECTION,
            label,
            **line,
            **m,
            model_tflop=model_tflop,
            tflops=tflops,
            mfu=mfu,
            tokens_per_s=shape.rows * batch * fam.image_tokens(cfg, shape) / seconds,
            value=f"{tflops:.3g} TFLOP/s" + ("" if mfu is None else f", MFU {mfu:.1%}"),
        )
    del model, params, inputs


def section_families(chk: Check, rec: Recorder, allowance: float) -> None:
    """The families one after another, each within its weighted share of the section's time."""
    end = time.monotonic() + allowance
    for i, name in enumerate(chk.families):
        rest = chk.families[i:]
        share = (end - time.monotonic()) * FAMILY_WEIGHTS[name] / sum(FAMILY_WEIGHTS[r] for r in rest)
        if share < chk.profile.family_minimum_s:
            rec.write(
                SECTION,
                name,
                status="skipped",
                family=name,
                reason=f"its share {share:.0f} s < {chk.profile.family_minimum_s:.0f} s",
            )
            continue
        res: dict = {}
        run_guarded(res, share, lambda: measure_family(chk, rec, name, share))
        free_memory(chk.device)
        if res["status"] != "ok":
            rec.write(SECTION, name, family=name, **res)
