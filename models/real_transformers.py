"""The four families' transformers at their published sizes with random weights, and the inputs of one velocity call
with synthetic text embeddings: what a forward and backward at real cost needs when no checkpoint is at hand
(``scripts/gpu_check.py``). The tiny twins' transformers (``models/tiny_*.py``) take inputs built the same way, so a
CPU smoke run goes through the same code at toy width.

Each family's inputs are what its adapter's ``velocity`` hands the transformer (``models/flux.py``, ``sd3.py``,
``qwenimage.py``, ``wan.py``): the latent layout, the timestep scale, the guidance embedding and the shapes of the
text conditioning. The text states are random (no text encoder is built), in the compute dtype the frozen encoders
would return them in; latents are fp32 like the samplers'. ``velocity`` runs the call under autocast and returns
fp32, as the adapters do.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, replace
from typing import Callable

import torch
from torch import nn

from models.published_configs import FLUX_DEV, QWEN_IMAGE, SD35_MEDIUM, WAN21_T2V_1_3B

SIGMA = 0.7  # noise level of the call (any interior value costs the same)
FLUX_GUIDANCE = 3.5  # FLUX.1-dev's distilled guidance (conf/model/flux.yaml)
VAE_FACTOR = 8  # pixels per latent pixel of every real family's VAE (Wan: also 4 frames per latent frame)


@dataclass(frozen=True)
class CallShape:
    """Size of one velocity call: the image (or video) in pixels, text tokens, and rows (2 with true CFG: the
    adapters batch [uncond, cond] into one forward)."""

    height: int
    width: int
    text_tokens: int
    rows: int = 1
    frames: int = 1

    def latent_hw(self) -> tuple[int, int]:
        return self.height // VAE_FACTOR, self.width // VAE_FACTOR


@dataclass(frozen=True)
class Family:
    """One family: its transformer class, published and tiny configs, the call size measured on a GPU (the project's
    training resolution, conf/model/<name>.yaml) and a tiny one for CPU smoke runs, and its input builder."""

    name: str
    class_name: str
    config: dict
    tiny_config: str  # dotted path of the twin's TRANSFORMER dict
    shape: CallShape
    smoke_shape: CallShape
    inputs: Callable[[Family, dict, CallShape, torch.device, torch.dtype, torch.Generator], dict]
    image_tokens: Callable[[dict, CallShape], int]

    def transformer_config(self, tiny: bool) -> dict:
        if not tiny:
            return dict(self.config)
        module, name = self.tiny_config.rsplit(".", 1)
        return dict(getattr(importlib.import_module(module), name))

    def transformer_class(self) -> type[nn.Module]:
        import diffusers

        return getattr(diffusers, self.class_name)

    def count_parameters(self, config: dict) -> int:
        """Parameters of the transformer, counted on the meta device (nothing allocated)."""
        with torch.device("meta"):
            return sum(p.numel() for p in self.transformer_class()(**config).parameters())

    def build(self, config: dict, device: torch.device, dtype: torch.dtype = torch.float32) -> nn.Module:
        """The transformer with random weights, constructed directly on ``device`` by its own initialisers (meta +
        ``to_empty`` would leave RoPE tables and parameters of modules without ``reset_parameters`` as garbage).
        A lower ``dtype`` casts the parameters one by one (peak: the fp32 model plus one tensor), except those of
        the class's ``_keep_in_fp32_modules``, which ``from_pretrained(torch_dtype=...)`` keeps in fp32 too."""
        with torch.device(device):
            model = self.transformer_class()(**config)
        if dtype != torch.float32:
            keep = set(getattr(model, "_keep_in_fp32_modules", None) or ())
            for name, param in model.named_parameters():
                if not keep.intersection(name.split(".")):
                    param.data = param.data.to(dtype)
        return model

    def call_inputs(
        self, config: dict, shape: CallShape, device: torch.device, text_dtype: torch.dtype, seed: int = 0
    ) -> dict:
        return self.inputs(self, config, shape, device, text_dtype, torch.Generator().manual_seed(seed))


def velocity(model: nn.Module, inputs: dict, autocast_dtype: torch.dtype) -> torch.Tensor:
    """The transformer's prediction for ``inputs`` under autocast (off for fp32), in fp32, as the adapters'
    ``velocity`` computes it."""
    device_type = next(model.parameters()).device.type
    with torch.autocast(device_type, dtype=autocast_dtype, enabled=autocast_dtype != torch.float32):
        return model(**inputs, return_dict=False)[0].float()


# ---------------------------------------------------------------------------------------------------- inputs
def _randn(shape, g: torch.Generator, device: torch.device, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Drawn on the CPU (seeded the same everywhere, like Backbone.initial_noise), then moved."""
    return torch.randn(shape, generator=g).to(device=device, dtype=dtype)


def _packed_grid(shape: CallShape) -> tuple[int, int]:
    """FLUX / Qwen-Image: latents packed 2x2 into tokens, one per 16x16 pixels."""
    h, w = shape.latent_hw()
    return h // 2, w // 2


def _flux_inputs(fam: Family, cfg: dict, s: CallShape, device, text_dtype, g) -> dict:
    from diffusers import FluxPipeline

    h, w = _packed_grid(s)
    rows = s.rows
    return dict(
        hidden_states=_randn((rows, h * w, cfg["in_channels"]), g, device),
        timestep=torch.full((rows,), SIGMA, device=device),  # sigma (x1000 inside)
        guidance=(torch.full((rows,), FLUX_GUIDANCE, device=device) if cfg.get("guidance_embeds") else None),
        pooled_projections=_randn((rows, cfg["pooled_projection_dim"]), g, device, text_dtype),
        encoder_hidden_states=_randn((rows, s.text_tokens, cfg["joint_attention_dim"]), g, device, text_dtype),
        txt_ids=torch.zeros(s.text_tokens, 3, device=device, dtype=text_dtype),
        img_ids=FluxPipeline._prepare_latent_image_ids(1, h, w, device, text_dtype),
    )


def _sd3_inputs(fam: Family, cfg: dict, s: CallShape, device, text_dtype, g) -> dict:
    h, w = s.latent_hw()
    rows = s.rows
    return dict(
        hidden_states=_randn((rows, cfg["in_channels"], h, w), g, device),  # patchified inside
        timestep=torch.full((rows,), SIGMA, device=device) * 1000.0,  # SD3 scale: 0..1000
        encoder_hidden_states=_randn((rows, s.text_tokens, cfg["joint_attention_dim"]), g, device, text_dtype),
        pooled_projections=_randn((rows, cfg["pooled_projection_dim"]), g, device, text_dtype),
    )


def _qwen_inputs(fam: Family, cfg: dict, s: CallShape, device, text_dtype, g) -> dict:
    h, w = _packed_grid(s)
    rows = s.rows
    return dict(
        hidden_states=_randn((rows, h * w, cfg["in_channels"]), g, device),
        timestep=torch.full((rows,), SIGMA, device=device),  # sigma (x1000 inside)
        encoder_hidden_states=_randn((rows, s.text_tokens, cfg["joint_attention_dim"]), g, device, text_dtype),
        encoder_hidden_states_mask=torch.ones(rows, s.text_tokens, dtype=torch.long, device=device),
        img_shapes=[[(1, h, w)]] * rows,
    )


def _wan_inputs(fam: Family, cfg: dict, s: CallShape, device, text_dtype, g) -> dict:
    from models.wan import wan_model_timestep

    h, w = s.latent_hw()
    frames = (s.frames - 1) // 4 + 1  # 4 frames per latent frame
    rows = s.rows
    sigma = torch.full((rows,), SIGMA, dtype=torch.float64)
    return dict(
        hidden_states=_randn((rows, cfg["in_channels"], frames, h, w), g, device),
        timestep=wan_model_timestep(sigma).to(device=device, dtype=torch.float32),  # UniPC's int64 steps
        encoder_hidden_states=_randn((rows, s.text_tokens, cfg["text_dim"]), g, device, text_dtype),
    )


def _packed_tokens(cfg: dict, s: CallShape) -> int:
    h, w = _packed_grid(s)
    return h * w


def _sd3_tokens(cfg: dict, s: CallShape) -> int:
    h, w = s.latent_hw()
    return (h // cfg["patch_size"]) * (w // cfg["patch_size"])


def _wan_tokens(cfg: dict, s: CallShape) -> int:
    h, w = s.latent_hw()
    p_t, p_h, p_w = cfg["patch_size"]
    return ((s.frames - 1) // 4 + 1) // p_t * (h // p_h) * (w // p_w)


# Call sizes. GPU: the project's training resolution (conf/model/<name>.yaml): 512x512 images (FLUX: T5 padded to
# 512 tokens; SD3.5: 77 CLIP + 256 T5 tokens; Qwen-Image: 128 prompt tokens, unpadded as its adapter keeps them),
# true CFG as 2 rows where the family uses it; Wan2.1 at 480x832 with 33 frames (9 latent frames, 14 040 tokens a
# row) instead of the recipe's 81 (21 latent frames, 32 760 tokens): attention grows with the square of the tokens,
# and the 81-frame call would take most of a check's minute for Wan (pass a CallShape with frames=81 to measure it).
# Smoke: the tiny twins' widths at a few tokens.
FAMILIES: dict[str, Family] = {
    "flux": Family(
        "flux",
        "FluxTransformer2DModel",
        FLUX_DEV,
        "models.tiny_flux.TRANSFORMER",
        CallShape(512, 512, text_tokens=512),
        CallShape(64, 64, text_tokens=8),
        _flux_inputs,
        _packed_tokens,
    ),
    "sd35m": Family(
        "sd35m",
        "SD3Transformer2DModel",
        SD35_MEDIUM,
        "models.tiny_sd3.TRANSFORMER",
        CallShape(512, 512, text_tokens=77 + 256, rows=2),
        CallShape(64, 64, text_tokens=8, rows=2),
        _sd3_inputs,
        _sd3_tokens,
    ),
    "qwenimage": Family(
        "qwenimage",
        "QwenImageTransformer2DModel",
        QWEN_IMAGE,
        "models.tiny_qwenimage.TRANSFORMER",
        CallShape(512, 512, text_tokens=128, rows=2),
        CallShape(64, 64, text_tokens=8, rows=2),
        _qwen_inputs,
        _packed_tokens,
    ),
    "wan2.1": Family(
        "wan2.1",
        "WanTransformer3DModel",
        WAN21_T2V_1_3B,
        "models.tiny_wan.TRANSFORMER",
        CallShape(480, 832, text_tokens=512, rows=2, frames=33),
        CallShape(64, 64, text_tokens=8, rows=2, frames=5),
        _wan_inputs,
        _wan_tokens,
    ),
}


def with_frames(shape: CallShape, frames: int) -> CallShape:
    """``shape`` with another frame count (4k + 1, as the Wan VAE needs)."""
    if frames < 1 or (frames - 1) % 4:
        raise ValueError(f"frames must be 4k + 1 (1, 5, ..., 81), got {frames}")
    return replace(shape, frames=frames)
