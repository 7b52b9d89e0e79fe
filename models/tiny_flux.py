"""Tiny random twin of FLUX.1: the same diffusers/transformers classes at toy width, written to a folder with
``save_pretrained`` and loaded back through :class:`models.flux.FluxBackbone`, so CPU runs exercise the production
loading path. The twin is deterministic in its seed and cached under ``cache_dir``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from models.flux import FluxBackbone
from models.tiny_components import CLIP, T5, VAE, WORDS
from models.tiny_pretrain import pretrain_vae
from models.tiny_tokenizers import make_clip_tokenizer, make_t5_tokenizer
from models.twins import TinyTwin, materialize, recipe_key

# Width chosen so the CPU demo learns in minutes: 16-channel packed latents (4 VAE channels x 2x2), 2 double + 2
# single blocks. Same classes and layout as FLUX.1-dev (guidance embedding included). Its text encoders, VAE and
# words are the shared tiny components as they are (models/tiny_components.py).
TRANSFORMER: dict[str, Any] = dict(
    patch_size=1,
    in_channels=16,
    num_layers=2,
    num_single_layers=2,
    attention_head_dim=16,
    num_attention_heads=2,
    joint_attention_dim=32,
    pooled_projection_dim=32,
    axes_dims_rope=[4, 4, 8],
    guidance_embeds=True,
)
# FLUX.1-dev's block width (24 heads x 128, joint attention and MLP as the real model) at the depth of the "small"
# bench config (2 double + 4 single blocks, 1.30 B parameters), on the twin's text encoders and VAE: the method
# benches' GPU size, at which the transformer's passes dominate a step (scripts/gpu_check.py).
WIDE_TRANSFORMER: dict[str, Any] = dict(
    patch_size=1,
    in_channels=16,
    num_layers=2,
    num_single_layers=4,
    attention_head_dim=128,
    num_attention_heads=24,
    joint_attention_dim=32,
    pooled_projection_dim=32,
    axes_dims_rope=[16, 56, 56],
    guidance_embeds=True,
)
VAE_PRETRAIN_STEPS = 300  # models/tiny_pretrain.py: makes saturated colours reachable (~10 s once)
VERSION = 2  # bump when the recipe above changes, so cached twins are rebuilt


def build_tiny_flux_pipeline(
    seed: int = 0,
    pretrain_steps: int = VAE_PRETRAIN_STEPS,
    transformer: dict | None = None,
    clip: dict | None = None,
    t5: dict | None = None,
):
    """A ``FluxPipeline`` of tiny components: random transformer and text encoders, and a VAE pre-trained for
    ``pretrain_steps`` on synthetic colour images (deterministic in ``seed``). ``transformer``, ``clip`` and ``t5``
    replace the recipe's sizes (the benches' variants; text widths must match the transformer's
    ``joint_attention_dim`` and ``pooled_projection_dim``)."""
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel
    from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel

    torch.manual_seed(seed)
    clip_tok = make_clip_tokenizer()
    t5_tok = make_t5_tokenizer(list(WORDS))
    pipe = FluxPipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0),
        text_encoder=CLIPTextModel(CLIPTextConfig(vocab_size=len(clip_tok), **(clip or CLIP))).eval(),
        text_encoder_2=T5EncoderModel(T5Config(vocab_size=len(t5_tok), **(t5 or T5))).eval(),
        tokenizer=clip_tok,
        tokenizer_2=t5_tok,
        transformer=FluxTransformer2DModel(**(transformer or TRANSFORMER)),
        vae=AutoencoderKL(**VAE),
    )
    if pretrain_steps:
        pretrain_vae(pipe.vae, steps=pretrain_steps, seed=seed)
    return pipe


def materialize_tiny_flux(cache_dir: str | Path | None = None, seed: int = 0) -> Path:
    """Write the twin once into the cache (see :func:`models.twins.materialize`) and return its folder."""
    key = recipe_key(VERSION, seed, TRANSFORMER, VAE, CLIP, T5, VAE_PRETRAIN_STEPS)
    return materialize("tiny_flux", key, lambda: build_tiny_flux_pipeline(seed), cache_dir)


def materialize_tiny_flux_variant(
    transformer: dict,
    clip: dict | None = None,
    t5: dict | None = None,
    cache_dir: str | Path | None = None,
    seed: int = 0,
) -> Path:
    """The twin with another transformer (``clip`` / ``t5``: keys that replace the text encoders' sizes) and an
    untrained VAE, written once into the cache like the twin; ``model=tiny_flux model.path=<folder>`` loads it.
    For benches that vary the transformer's size: the VAE's colour pre-training only matters for what a reward
    sees, not for cost."""
    clip_cfg, t5_cfg = {**CLIP, **(clip or {})}, {**T5, **(t5 or {})}
    key = recipe_key(VERSION, seed, transformer, VAE, clip_cfg, t5_cfg, 0)
    return materialize(
        "tiny_flux_variant",
        key,
        lambda: build_tiny_flux_pipeline(seed, pretrain_steps=0, transformer=transformer, clip=clip_cfg, t5=t5_cfg),
        cache_dir,
    )


class TinyFluxBackbone(TinyTwin, FluxBackbone):
    """``FluxBackbone`` over the tiny twin folder (built on first use)."""

    name = "tiny_flux"
    materialize = staticmethod(materialize_tiny_flux)
