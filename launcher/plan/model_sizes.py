"""What the planner reads of a model without loading a weight: its family, the transformer's and the VAE's configs
(a local folder's or the hub cache's ``config.json``, a tiny twin's recipe, or the published config), the frozen
companions' parameter counts, and the token and element counts of one transformer call (docs/memory.md).

Imports neither torch nor the model libraries (a tiny twin's recipe module is imported only for a twin)."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

DTYPE_BYTES = {"float32": 4, "fp32": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "float64": 8}
VAE_FACTOR = 8  # pixels per latent pixel of the published VAEs, when no local VAE config says otherwise
VAE_FRAMES = 4  # Wan's frames per latent frame

#: the diffusers families, by the module of the model config's ``_target_``
FAMILY_OF_MODULE = {
    "models.flux": "flux",
    "models.tiny_flux": "flux",
    "models.tiny_flux_pretrained": "flux",
    "models.sd3": "sd3",
    "models.tiny_sd3": "sd3",
    "models.qwenimage": "qwenimage",
    "models.tiny_qwenimage": "qwenimage",
    "models.wan": "wan",
    "models.tiny_wan": "wan",
}
TINY_TWINS = {
    "models.tiny_flux",
    "models.tiny_flux_pretrained",
    "models.tiny_sd3",
    "models.tiny_qwenimage",
    "models.tiny_wan",
}
#: published parameter counts of the frozen companions (model cards; the sum of the checkpoints' tensors)
TEXT_ENCODER_PARAMS = {
    "flux": 123.1e6 + 4.762e9,  # CLIP-L text + T5-XXL encoder
    "sd3": 123.1e6 + 694.7e6 + 4.762e9,  # CLIP-L + CLIP-G (with projections) + T5-XXL
    "qwenimage": 8.292e9,  # Qwen2.5-VL-7B (with its vision tower)
    "wan": 5.680e9,
}  # UMT5-XXL encoder
VAE_PARAMS = {"flux": 83.8e6, "sd3": 83.8e6, "qwenimage": 126.9e6, "wan": 126.9e6}
REWARD_PARAMS = {"hps": 986.1e6, "pickscore": 986.1e6, "clip": 427.6e6}  # open_clip ViT-H-14, CLIP-H, CLIP-L
# the whole CLIP ViT-L/14 (rewards/clip_image.py) plus the LAION head (768-1024-128-64-16-1); diversity's CLIP-L; BLIP's
# ViT-L/16 (303.3 M) and text encoder with cross-attention (142.0 M) plus ImageReward's head, counted on the meta device
REWARD_PARAMS |= {"aesthetic": 428.5e6, "diversity": 427.6e6, "imagereward": 446.2e6}
#: the calibrated VAE of each family (SD3.5's VAE has FLUX.1's architecture)
VAE_KIND = {"flux": "flux", "sd3": "flux", "qwenimage": "qwenimage", "wan": "wan"}
QWEN_TEXT_TOKENS = 128  # Qwen-Image keeps prompts unpadded: a long prompt after the chat template


def family_of(model: dict) -> str | None:
    return FAMILY_OF_MODULE.get(str(model.get("_target_", "")).rsplit(".", 1)[0])


def transformer_config(model: dict, family: str) -> tuple[dict, str]:
    """The transformer's config without weights: a local folder's ``transformer/config.json``, the hub cache's copy,
    the tiny twin's recipe, or the family's published config."""
    from models import published_configs as pub

    path = model.get("path")
    if is_tiny_twin(model):
        return _twin_recipe(model, "TRANSFORMER"), "tiny twin"
    found = _stored_config(path, "transformer")
    if found is not None:
        return found
    published = {
        "flux": pub.FLUX_DEV,
        "sd3": pub.SD35_MEDIUM,
        "qwenimage": pub.QWEN_IMAGE,
        "wan": pub.WAN21_T2V_14B if "14b" in str(path).lower() else pub.WAN21_T2V_1_3B,
    }[family]
    return dict(published), f"published config of {path}"


def is_tiny_twin(model: dict) -> bool:
    """A tiny twin built from its recipe (no ``model.path``)."""
    return model.get("path") is None and str(model.get("_target_", "")).rsplit(".", 1)[0] in TINY_TWINS


def _twin_recipe(model: dict, name: str) -> dict:
    """A tiny twin's component config (``TRANSFORMER``, ``VAE``) from its module (which imports torch)."""
    import importlib

    return dict(getattr(importlib.import_module(str(model["_target_"]).rsplit(".", 1)[0]), name))


def _stored_config(path, component: str) -> tuple[dict, str] | None:
    """``<component>/config.json`` of a local folder or of the hub cache's copy of ``path``; None without either."""
    local = Path(os.path.expanduser(str(path))) / component / "config.json"
    if local.is_file():
        return _config(local), str(local)
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(str(path), f"{component}/config.json")
        if isinstance(cached, str):
            return _config(Path(cached)), f"hub cache of {path}"
    except Exception:  # noqa: BLE001 - no cache or not a hub id
        pass
    return None


def _config(path: Path) -> dict:
    return {k: v for k, v in json.loads(path.read_text()).items() if not k.startswith("_")}


def component_params(model: dict, family: str) -> dict[str, float]:
    """Parameters of the text encoders and the VAE: read from the safetensors headers of a local ``model.path``
    (no weight is read), or the tiny twin's folder, else the family's published sizes."""
    path = model.get("path")
    folder = Path(os.path.expanduser(str(path))) if path else None
    if is_tiny_twin(model):
        return {"text_encoders": 0.0, "vae": 0.0}  # a few MB: below the plan's resolution
    if folder is not None and folder.is_dir():
        encoders = sum(safetensors_params(folder / d) for d in ("text_encoder", "text_encoder_2", "text_encoder_3"))
        return {"text_encoders": float(encoders), "vae": float(safetensors_params(folder / "vae"))}
    return {"text_encoders": TEXT_ENCODER_PARAMS[family], "vae": VAE_PARAMS[family]}


def safetensors_params(folder: Path) -> int:
    """Elements of every tensor in ``folder``'s safetensors files, from their JSON headers alone."""
    import struct

    total = 0
    for file in folder.glob("*.safetensors") if folder.is_dir() else []:
        with open(file, "rb") as f:
            header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
        total += sum(math.prod(v["shape"]) for k, v in header.items() if k != "__metadata__")
    return total


@dataclass(frozen=True)
class CallSize:
    image_tokens: int
    text_tokens: int
    rows_per_sample: int  # 2 with true CFG
    latent_elements: int  # per sample
    pixels: int  # per sample: 3 x height x width x frames
    frames: int = 1


def vae_config(model: dict) -> dict | None:
    """The VAE's config without weights: the tiny twin's recipe, or ``vae/config.json`` of a local ``model.path`` or
    of the hub cache's copy; None without either (the published factor then)."""
    if is_tiny_twin(model):
        return _twin_recipe(model, "VAE")
    found = _stored_config(model["path"], "vae") if model.get("path") else None
    return found[0] if found is not None else None


def vae_factors(model: dict, family: str) -> tuple[int, int]:
    """(pixels per latent pixel, frames per latent frame) as the diffusers pipelines compute them from the VAE's
    config: ``2 ** (len(block_out_channels) - 1)`` (FLUX.1, SD3.5), ``2 ** len(temperal_downsample)`` (Qwen-Image),
    ``scale_factor_spatial`` / ``scale_factor_temporal`` (Wan); the published VAEs' 8 (and 4) without a local
    config (docs/memory.md#the-planners-model)."""
    cfg = vae_config(model) or {}
    if family == "wan":
        return int(cfg.get("scale_factor_spatial", VAE_FACTOR)), int(cfg.get("scale_factor_temporal", VAE_FRAMES))
    if family == "qwenimage" and "temperal_downsample" in cfg:
        return 2 ** len(cfg["temperal_downsample"]), 1
    if "block_out_channels" in cfg:
        return 2 ** (len(cfg["block_out_channels"]) - 1), 1
    return VAE_FACTOR, 1


def call_size(model: dict, family: str, tconfig: dict) -> CallSize:
    h, w = int(model["height"]), int(model["width"])
    factor, frames_per_latent = vae_factors(model, family)
    lat_h, lat_w = h // factor, w // factor
    cfg_rows = 2 if float(model.get("guidance_scale", 1.0)) > 1.0 else 1
    seq = int(model.get("max_sequence_length", 0))
    if family == "wan":
        frames = int(model["num_frames"])
        lat_f = (frames - 1) // frames_per_latent + 1
        p_t, p_h, p_w = tconfig["patch_size"]
        tokens = (lat_f // p_t) * (lat_h // p_h) * (lat_w // p_w)
        return CallSize(
            tokens, seq, cfg_rows, tconfig["in_channels"] * lat_f * lat_h * lat_w, 3 * h * w * frames, frames
        )
    channels = tconfig["in_channels"] if family == "sd3" else tconfig["in_channels"] // 4  # FLUX, Qwen: packed 2x2
    tokens = (lat_h // 2) * (lat_w // 2)
    text = {"flux": seq, "sd3": 77 + seq, "qwenimage": min(seq, QWEN_TEXT_TOKENS)}[family]
    return CallSize(tokens, text, cfg_rows, channels * lat_h * lat_w, 3 * h * w)
