"""Tiny random twin of Stable Diffusion 3.5 Medium: the same diffusers/transformers classes at toy width (MMDiT-X with
a dual-attention layer and RMS qk-norm, two CLIP text encoders with projection, T5, a 16-channel ``AutoencoderKL``),
written to a folder with ``save_pretrained`` and loaded back through :class:`models.sd3.SD3Backbone`.

Its VAE is random by default (``VAE_PRETRAIN_STEPS = 0``): pre-training it as the tiny FLUX twin's costs minutes on a
shared 2-core machine, so CPU runs exercise the mechanics; ``build_tiny_sd3_pipeline(pretrain_steps=300)`` gives a
VAE that can show saturated colours (models/tiny_pretrain.py).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch

from models.sd3 import SD3Backbone
from models.tiny_components import CLIP, WORDS
from models.tiny_components import T5 as TINY_T5
from models.tiny_components import VAE as TINY_VAE
from models.tiny_pretrain import pretrain_vae
from models.tiny_tokenizers import make_clip_tokenizer, make_t5_tokenizer
from models.twins import TinyTwin, materialize, recipe_key

# patch 2 (as SD3.5): a 32x32 image -> 16x16x16 latent -> 64 tokens. joint_attention_dim must be >= 2 x CLIP width
# (the pipeline pads the concatenated CLIP states to the T5 width; narrower silently crops, docs/models.md#family-notes)
TRANSFORMER: dict[str, Any] = dict(
    sample_size=16,
    patch_size=2,
    in_channels=16,
    num_layers=2,
    attention_head_dim=8,
    num_attention_heads=4,
    caption_projection_dim=32,
    joint_attention_dim=64,
    pooled_projection_dim=64,
    out_channels=16,
    pos_embed_max_size=32,
    dual_attention_layers=(0,),
    qk_norm="rms_norm",
)
# the shared tiny VAE and T5 (models/tiny_components.py) with SD3.5's 16 latent channels and a text width of 64
VAE: dict[str, Any] = {**TINY_VAE, "latent_channels": 16, "scaling_factor": 1.5305}
T5: dict[str, Any] = {**TINY_T5, "d_model": 64}
SCHEDULER: dict[str, Any] = dict(num_train_timesteps=1000, shift=3.0)  # stabilityai/stable-diffusion-3.5-medium
CLIP_TOKENS = 16  # the pipeline pads both CLIPs to the tokenizer's length (77 in SD3.5): 16 + 16 T5 text tokens here
VAE_PRETRAIN_STEPS = 0  # see the module docstring
VERSION = 2


def build_tiny_sd3_pipeline(seed: int = 0, pretrain_steps: int = VAE_PRETRAIN_STEPS):
    from diffusers import (
        AutoencoderKL,
        FlowMatchEulerDiscreteScheduler,
        SD3Transformer2DModel,
        StableDiffusion3Pipeline,
    )
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection, T5Config, T5EncoderModel

    torch.manual_seed(seed)
    clip_tok, t5_tok = make_clip_tokenizer(CLIP_TOKENS), make_t5_tokenizer(list(WORDS))
    pipe = StableDiffusion3Pipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(**copy.deepcopy(SCHEDULER)),
        text_encoder=CLIPTextModelWithProjection(CLIPTextConfig(vocab_size=len(clip_tok), **CLIP)).eval(),
        text_encoder_2=CLIPTextModelWithProjection(CLIPTextConfig(vocab_size=len(clip_tok), **CLIP)).eval(),
        text_encoder_3=T5EncoderModel(T5Config(vocab_size=len(t5_tok), **copy.deepcopy(T5))).eval(),
        tokenizer=clip_tok,
        tokenizer_2=make_clip_tokenizer(CLIP_TOKENS),
        tokenizer_3=t5_tok,
        transformer=SD3Transformer2DModel(**copy.deepcopy(TRANSFORMER)),
        vae=AutoencoderKL(**copy.deepcopy(VAE)),
    )
    if pretrain_steps:
        pretrain_vae(pipe.vae, steps=pretrain_steps, seed=seed)
    return pipe


def materialize_tiny_sd3(cache_dir: str | Path | None = None, seed: int = 0) -> Path:
    key = recipe_key(VERSION, seed, TRANSFORMER, VAE, CLIP, T5, SCHEDULER, CLIP_TOKENS, VAE_PRETRAIN_STEPS)
    return materialize("tiny_sd35m", key, lambda: build_tiny_sd3_pipeline(seed), cache_dir)


class TinySD3Backbone(TinyTwin, SD3Backbone):
    """``SD3Backbone`` over the tiny twin folder (built on first use)."""

    name = "tiny_sd35m"
    materialize = staticmethod(materialize_tiny_sd3)
