"""Tiny random twin of Wan2.1 T2V: the same diffusers/transformers classes at toy width (``WanTransformer3DModel``,
UMT5, ``AutoencoderKLWan`` with 4x spatial / 4x temporal compression, the real UniPC flow-sigma scheduler config),
written with ``save_pretrained`` and loaded back through :class:`models.wan.WanBackbone`.

The VAE is random (see :mod:`models.tiny_qwenimage`): CPU runs exercise the mechanics, not colour learning.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch

from models.tiny_components import T5, WORDS
from models.tiny_tokenizers import make_t5_tokenizer
from models.twins import TinyTwin, materialize, recipe_key
from models.wan import WanBackbone

TRANSFORMER: dict[str, Any] = dict(
    patch_size=(1, 2, 2),
    num_attention_heads=2,
    attention_head_dim=12,
    in_channels=16,
    out_channels=16,
    text_dim=32,
    freq_dim=256,
    ffn_dim=32,
    num_layers=2,
    cross_attn_norm=True,
    qk_norm="rms_norm_across_heads",
    rope_max_seq_len=32,
)
# 5 frames of 32x32 -> latent (16, 2, 8, 8) -> 32 tokens after the 1x2x2 patchify
VAE: dict[str, Any] = dict(
    base_dim=8,
    z_dim=16,
    dim_mult=[1, 1, 1],
    num_res_blocks=1,
    temperal_downsample=[True, True],
    scale_factor_spatial=4,
    scale_factor_temporal=4,
    latents_mean=[0.0] * 16,
    latents_std=[1.0] * 16,
)
UMT5: dict[str, Any] = {k: v for k, v in T5.items() if k != "is_encoder_decoder"}  # the shared tiny T5, encoder only
# Wan-AI/Wan2.1-T2V-1.3B-Diffusers scheduler (flow_shift 3.0 for 480p)
SCHEDULER: dict[str, Any] = dict(
    prediction_type="flow_prediction",
    use_flow_sigmas=True,
    flow_shift=3.0,
    final_sigmas_type="zero",
    num_train_timesteps=1000,
    solver_order=2,
    solver_type="bh2",
    predict_x0=True,
    lower_order_final=True,
    timestep_spacing="linspace",
)
VERSION = 1


def build_tiny_wan_pipeline(seed: int = 0):
    from diffusers import AutoencoderKLWan, UniPCMultistepScheduler, WanPipeline, WanTransformer3DModel
    from transformers import UMT5Config, UMT5EncoderModel

    torch.manual_seed(seed)
    tok = make_t5_tokenizer(list(WORDS))
    text_encoder = UMT5EncoderModel(UMT5Config(vocab_size=len(tok), **copy.deepcopy(UMT5))).eval()
    return WanPipeline(
        tokenizer=tok,
        text_encoder=text_encoder,
        vae=AutoencoderKLWan(**copy.deepcopy(VAE)),
        scheduler=UniPCMultistepScheduler(**copy.deepcopy(SCHEDULER)),
        transformer=WanTransformer3DModel(**copy.deepcopy(TRANSFORMER)),
    )


def materialize_tiny_wan(cache_dir: str | Path | None = None, seed: int = 0) -> Path:
    key = recipe_key(VERSION, seed, TRANSFORMER, VAE, UMT5, SCHEDULER, WORDS)
    return materialize("tiny_wan2.1", key, lambda: build_tiny_wan_pipeline(seed), cache_dir)


class TinyWanBackbone(TinyTwin, WanBackbone):
    """``WanBackbone`` over the tiny twin folder (built on first use)."""

    name = "tiny_wan2.1"
    materialize = staticmethod(materialize_tiny_wan)
