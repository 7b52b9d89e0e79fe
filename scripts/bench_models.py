"""Speed and memory of each model family's backbone: load time, prompt encoding, one guided velocity forward, one
forward + backward, decode; peak GPU memory on CUDA. Not a test: figures depend on the machine.

    .venv/bin/python scripts/bench_models.py                          # every tiny twin on the CPU
    .venv/bin/python scripts/bench_models.py --models sd35m --set path=/models/sd35m height=1024 width=1024

``--set key=value`` overrides model config keys (as ``model.key=value`` on the command line).
"""

from __future__ import annotations

import argparse
import json
import time

import torch


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def bench(model: str, overrides: list[str], batch: int, reps: int) -> dict:
    from launcher.components import build
    from launcher.config import compose

    cfg = compose([f"model={model}", *[f"model.{o}" for o in overrides]]).model
    t0 = time.perf_counter()
    bb = build(cfg, "model")
    out = {
        "model": model,
        "finetune": cfg.finetune,
        "load_s": time.perf_counter() - t0,
        "trainable_params": sum(p.numel() for p in bb.trainable_parameters()),
        "transformer_params": sum(p.numel() for p in bb.transformer.parameters()),
    }
    dev = bb.device
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    prompts = [f"a photo of a red square number {i}" for i in range(batch)]
    t0 = time.perf_counter()
    emb = bb.encode_prompts(prompts)
    _sync(dev)
    out["encode_s"] = time.perf_counter() - t0
    x = bb.initial_noise(batch, torch.Generator().manual_seed(0))
    sigma = torch.full((batch,), 0.7, device=dev)
    with torch.no_grad():
        bb.velocity(x, sigma, emb)  # warm-up
        _sync(dev)
        t0 = time.perf_counter()
        for _ in range(reps):
            bb.velocity(x, sigma, emb)
        _sync(dev)
    out["velocity_fwd_s"] = (time.perf_counter() - t0) / reps
    t0 = time.perf_counter()
    for _ in range(reps):
        bb.velocity(x, sigma, emb).square().mean().backward()
    _sync(dev)
    out["velocity_fwd_bwd_s"] = (time.perf_counter() - t0) / reps
    with torch.no_grad():
        t0 = time.perf_counter()
        bb.decode(x)
        _sync(dev)
    out["decode_s"] = time.perf_counter() - t0
    if dev.type == "cuda":
        out["peak_gpu_gib"] = torch.cuda.max_memory_allocated() / 2**30
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=["tiny_flux", "tiny_sd35m", "tiny_qwenimage", "tiny_wan2.1"])
    p.add_argument("--set", nargs="*", default=[], help="model config overrides key=value")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args()
    for m in args.models:
        print(
            json.dumps(
                {
                    k: (round(v, 4) if isinstance(v, float) else v)
                    for k, v in bench(m, args.set, args.batch, args.reps).items()
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
