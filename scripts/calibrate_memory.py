"""Calibrate the memory planner's activation model on the CPU (docs/memory.md#calibration).

For each family at its published width, the transformer is built at reduced depth: the root alone (embedders, final
norm and projection; no block), then one block of each kind. One velocity call is measured at three sizes (image
tokens n1 or n2, text tokens t1 or t2; one row):

* ``saved``: the bytes of the tensors autograd keeps for the backward of a forward with gradients in fp32 (counted
  exactly with ``torch.autograd.graph.saved_tensors_hooks``, each storage once, parameters and buffers excluded);
* ``peak``: the peak increase during that forward: ``saved`` plus the working set of the block running;
* ``infer``: the peak increase of a forward without gradients: the working set of a sampling call;
* ``saved_lora``, ``peak_lora``: the same two for a LoRA forward: the weights frozen, a peft adapter (rank 32) on the
  attention projections (the planner's ``LORA_CALIBRATED_TARGETS``), the image and text streams requiring gradients
  from the first block on, as in every block after the first adapter. A frozen ``nn.Linear`` keeps no input for a
  weight gradient, so a LoRA forward saves about half of a full fine-tuning one (docs/memory.md#calibration).

A block kind's figure is the call's figure minus the root-only call's, and ``bytes = a_img * n + a_txt * t + c`` is
solved from the three sizes (exactly: three equations, three unknowns); the root gets its own fit. The planner
(launcher/plan/memory_plan.py) scales these per-token bytes by rows, tokens, depth and compute dtype. Memory is measured as
scripts/memory_probe.py says (anonymous RSS, file pages excluded).

    MALLOC_MMAP_THRESHOLD_=65536 .venv/bin/python scripts/calibrate_memory.py               # every family, ~15 min
    .venv/bin/python scripts/calibrate_memory.py --families flux --write                     # rewrite the table

``--write`` replaces ``launcher/plan/coefficients.py`` with the fitted table (keeping its docstring's method note).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from launcher.plan.activations import LORA_CALIBRATED_TARGETS  # noqa: E402
from memory_probe import MALLOC_ENV, PeakProbe, malloc_env  # noqa: E402

#: per family: the published config and the reduced-depth variants (unit name -> config overrides)
VARIANTS = {
    "flux": (
        "FLUX_DEV",
        {
            "root": dict(num_layers=0, num_single_layers=0),
            "double": dict(num_layers=1, num_single_layers=0),
            "single": dict(num_layers=0, num_single_layers=1),
        },
    ),
    # SD3.5: a smaller table of position embeddings (384^2 x 1536 fp32 is 0.9 GB; the calls crop 24^2 of it)
    "sd3": (
        "SD35_MEDIUM",
        {
            "root": dict(num_layers=0, dual_attention_layers=(), pos_embed_max_size=64),
            "block_joint_last": dict(num_layers=1, dual_attention_layers=(), pos_embed_max_size=64),
            "pair_joint": dict(num_layers=2, dual_attention_layers=(), pos_embed_max_size=64),
            "pair_dual": dict(num_layers=2, dual_attention_layers=(0,), pos_embed_max_size=64),
        },
    ),
    "qwenimage": ("QWEN_IMAGE", {"root": dict(num_layers=0), "block": dict(num_layers=1)}),
    "wan": ("WAN21_T2V_1_3B", {"root": dict(num_layers=0), "block": dict(num_layers=1)}),
    "wan14b": ("WAN21_T2V_14B", {"root": dict(num_layers=0), "block": dict(num_layers=1)}),
}
FAMILY_OF = {"flux": "flux", "sd3": "sd35m", "qwenimage": "qwenimage", "wan": "wan2.1", "wan14b": "wan2.1"}
#: what is measured per call: the activations autograd saves, the peak of that forward, the peak without gradients;
#: the first two again for a LoRA forward
KINDS = ("saved", "peak", "infer", "saved_lora", "peak_lora")
#: the LoRA adapter of the calibration: every attention projection the families' configs target (models/*_config.py)
LORA_RANK = 32
#: (image side in pixels, text tokens): n1/t1, n2/t1, n1/t2 -> image tokens 64 / 576 (one latent frame for Wan)
SIZES = ((128, 32), (384, 32), (128, 224))


def build(family_key: str, config: dict):
    """The transformer with cheap constant weights (values do not change memory), its buffers (RoPE) computed."""
    from models.real_transformers import FAMILIES
    from models.sharded_load import build_on_meta

    model = build_on_meta(FAMILIES[family_key].transformer_class(), config)
    buffers = {n: b.clone() for n, b in model.named_buffers()}
    model.to_empty(device="cpu")
    with torch.no_grad():
        for n, b in model.named_buffers():
            b.copy_(buffers[n])
        for p in model.parameters():
            p.fill_(0.01)
    return model


def measure(family_key: str, config: dict, side: int, text: int) -> dict[str, int]:
    from models.real_transformers import FAMILIES, CallShape, velocity

    fam = FAMILIES[family_key]
    shape = CallShape(side, side, text_tokens=text, rows=1, frames=1)
    model = build(family_key, config)
    inputs = fam.call_inputs(config, shape, torch.device("cpu"), torch.float32)
    with torch.no_grad(), PeakProbe() as infer:
        velocity(model, inputs, torch.float32)
    model.train()
    saved, peak = grad_forward(model, inputs)
    model.requires_grad_(False)
    add_lora(model)
    streams = {k: v.detach().requires_grad_(True) if k in STREAMS else v for k, v in inputs.items()}
    saved_lora, peak_lora = grad_forward(model, streams)
    result = {
        "image_tokens": fam.image_tokens(config, shape),
        "text_tokens": text,
        "infer": infer.increase,
        "saved": saved,
        "peak": peak,
        "saved_lora": saved_lora,
        "peak_lora": peak_lora,
    }
    del model, inputs, streams
    gc.collect()
    return result


#: the inputs that carry the image and text streams (every family's transformer names them so)
STREAMS = ("hidden_states", "encoder_hidden_states")


def grad_forward(model: torch.nn.Module, inputs: dict) -> tuple[int, int]:
    """(bytes autograd keeps for the backward, weights excluded; the forward's peak increase)."""
    from models.real_transformers import velocity

    params = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    saved: dict[int, int] = {}

    def keep(t: torch.Tensor) -> torch.Tensor:  # what autograd holds for the backward, weights excluded
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params:
            saved[ptr] = t.untyped_storage().nbytes()
        return t

    with PeakProbe() as train, torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
        out = velocity(model, inputs, torch.float32)
    del out
    gc.collect()
    return sum(saved.values()), train.increase


def add_lora(model: torch.nn.Module) -> None:
    """peft's adapter on the planner's ``LORA_CALIBRATED_TARGETS`` (models/finetune.py applies it the same way); the
    root alone has none."""
    from peft import LoraConfig

    try:
        model.add_adapter(
            LoraConfig(
                r=LORA_RANK,
                lora_alpha=2 * LORA_RANK,
                init_lora_weights="gaussian",
                target_modules=list(LORA_CALIBRATED_TARGETS),
            )
        )
    except ValueError:  # no attention projection: the root-only model
        pass


def solve(rows: list[dict], key: str) -> dict[str, float]:
    """``a_img, a_txt, c`` from the three sizes (n1 t1, n2 t1, n1 t2)."""
    (r0, r1, r2) = rows
    a_img = (r1[key] - r0[key]) / (r1["image_tokens"] - r0["image_tokens"])
    a_txt = (r2[key] - r0[key]) / (r2["text_tokens"] - r0["text_tokens"])
    c = r0[key] - a_img * r0["image_tokens"] - a_txt * r0["text_tokens"]
    return {"img": round(a_img), "txt": round(a_txt), "const": round(c)}


def calibrate(name: str) -> dict:
    from models import published_configs

    config_name, variants = VARIANTS[name]
    base = getattr(published_configs, config_name)
    measured = {
        unit: [measure(FAMILY_OF[name], dict(base, **over), *size) for size in SIZES] for unit, over in variants.items()
    }
    fits = {}
    for unit, rows in measured.items():
        if unit != "root":
            rows = [{**r, **{k: r[k] - root[k] for k in KINDS}} for r, root in zip(rows, measured["root"])]
        fits[unit] = {k: solve(rows, k) for k in KINDS}
    if name == "sd3":  # a joint block = (two joint-kind blocks) - (the last block); dual alike
        last = fits.pop("block_joint_last")
        for pair, unit in (("pair_joint", "block_joint"), ("pair_dual", "block_dual")):
            p = fits.pop(pair)
            fits[unit] = {k: {c: p[k][c] - last[k][c] for c in p[k]} for k in p}
        fits["block_joint_last"] = last
    return {"measured": measured, "fits": fits}


#: the published VAEs (models/published_configs.py) and how many latent frames their call decodes
VAES = {
    "flux": ("AutoencoderKL", "FLUX_VAE"),
    "qwenimage": ("AutoencoderKLQwenImage", "QWEN_IMAGE_VAE"),
    "wan": ("AutoencoderKLWan", "WAN21_VAE"),
}


def calibrate_vae(name: str, side: int = 32) -> dict:
    """Decoder working set per output pixel (one image, ``8 side`` pixels square): ``infer`` without gradients, ``grad``
    the peak of a decode whose input requires gradients (the adjoint methods' reward gradient), both in fp32."""
    import diffusers

    from models import published_configs

    cls, config_name = VAES[name]
    vae = getattr(diffusers, cls)(**getattr(published_configs, config_name)).eval().requires_grad_(False)
    video = name in ("qwenimage", "wan")
    latent = torch.randn((1, 16, 1, side, side) if video else (1, 16, side, side))
    pixels = (8 * side) ** 2
    with torch.no_grad(), PeakProbe() as infer:
        vae.decode(latent, return_dict=False)
    x = latent.clone().requires_grad_(True)
    with PeakProbe() as grad:
        vae.decode(x, return_dict=False)[0].sum()
    return {"infer": round(infer.increase / pixels), "grad": round(grad.increase / pixels)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--families", nargs="+", default=list(VARIANTS))
    p.add_argument("--vaes", nargs="*", default=list(VAES))
    p.add_argument("--write", action="store_true", help="rewrite launcher/plan/coefficients.py")
    args = p.parse_args()
    if any(os.environ.get(k) != v for k, v in MALLOC_ENV.items()):
        os.execve(sys.executable, [sys.executable, *sys.argv], malloc_env())  # malloc settings at start-up
    torch.set_num_threads(max(1, (os.cpu_count() or 2) // 2))
    results = {}
    for name in args.families:
        t0 = time.perf_counter()
        results[name] = calibrate(name)
        print(json.dumps({name: results[name]["fits"], "seconds": round(time.perf_counter() - t0, 1)}), flush=True)
    vaes = {name: calibrate_vae(name) for name in args.vaes}
    if vaes:
        print(json.dumps({"vae": vaes}), flush=True)
    if args.write:
        write_table({n: r["fits"] for n, r in results.items()}, vaes)
    print(json.dumps({n: r["fits"] for n, r in results.items()}))


def write_table(fits: dict, vaes: dict) -> None:
    from launcher.plan import coefficients as memory_coefficients

    table = {**memory_coefficients.ACTIVATION_BYTES, **fits}
    vae = {**memory_coefficients.VAE_DECODE_BYTES, **vaes}
    path = ROOT / "launcher" / "memory_coefficients.py"
    text = path.read_text()
    head = text[: text.index("ACTIVATION_BYTES = ")]
    path.write_text(f"{head}ACTIVATION_BYTES = {table_text(table)}\nVAE_DECODE_BYTES = {table_text(vae)}\n")


def table_text(table: dict) -> str:
    """A nested dict as Python source, one line per innermost entry."""

    def lines(d: dict, depth: int) -> list[str]:
        pad = "    " * (depth + 1)
        out = []
        for k in sorted(d):
            v = d[k]
            leaf = not isinstance(v, dict) or not any(isinstance(x, dict) for x in v.values())
            if leaf:
                out.append(f"{pad}{json.dumps(k)}: {json.dumps(v, sort_keys=True)},")
            else:
                out += [f"{pad}{json.dumps(k)}: {{", *lines(v, depth + 1), f"{pad}}},"]
        return out

    return "\n".join(["{", *lines(table, 0), "}"])


if __name__ == "__main__":
    main()
