"""Tiny random twin of Qwen-Image: the same diffusers/transformers classes at toy width
(``QwenImageTransformer2DModel``, a Qwen2.5-VL text encoder with a byte-level BPE tokenizer trained on the pipeline's chat template,
``AutoencoderKLQwenImage``, the real scheduler config), written with ``save_pretrained`` and loaded back through
:class:`models.qwenimage.QwenImageBackbone`.

The VAE is random (a 3-D causal VAE takes minutes to pre-train on 2 cores): CPU runs exercise the mechanics, not
colour learning (the tiny FLUX and SD3.5 twins have pre-trained VAEs for that).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch

from models.qwenimage import QwenImageBackbone
from models.tiny_components import WORDS
from models.tiny_tokenizers import make_qwen2_tokenizer
from models.twins import TinyTwin, materialize, recipe_key

TEMPLATE = (
    "<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, quantity, text, "
    "spatial relationships of the objects and background:<|im_end|>\n<|im_start|>user\n{}<|im_end|>\n"
    "<|im_start|>assistant\n"
)  # QwenImagePipeline.prompt_template_encode
# in_channels = 4 z (2x2 packing), out_channels = z; sum(axes_dims_rope) == attention_head_dim; joint_attention_dim
# == the text encoder's hidden size. VAE: 2 spatial downsamples (factor 4): a 32x32 image -> 8x8x16 -> 16 tokens.
TRANSFORMER: dict[str, Any] = dict(
    patch_size=2,
    in_channels=64,
    out_channels=16,
    num_layers=2,
    attention_head_dim=16,
    num_attention_heads=2,
    joint_attention_dim=16,
    guidance_embeds=False,
    axes_dims_rope=(8, 4, 4),
)
VAE: dict[str, Any] = dict(
    base_dim=8,
    z_dim=16,
    dim_mult=[1, 1, 1],
    num_res_blocks=1,
    temperal_downsample=[False, True],
    latents_mean=[0.0] * 16,
    latents_std=[1.0] * 16,
)
TEXT: dict[str, Any] = dict(
    hidden_size=16,
    intermediate_size=16,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=2,
    rope_theta=1e6,
    rope_scaling={"mrope_section": [1, 1, 2], "rope_type": "default", "type": "default"},
)
VISION: dict[str, Any] = dict(depth=2, hidden_size=16, intermediate_size=16, num_heads=2, out_hidden_size=16)
# Qwen/Qwen-Image scheduler: resolution-dependent exponential shift, stretched to a terminal sigma of 0.02
SCHEDULER: dict[str, Any] = dict(
    base_image_seq_len=256,
    base_shift=0.5,
    max_image_seq_len=8192,
    max_shift=0.9,
    num_train_timesteps=1000,
    shift=1.0,
    shift_terminal=0.02,
    time_shift_type="exponential",
    use_dynamic_shifting=True,
)
VERSION = 1


def build_tiny_qwenimage_pipeline(seed: int = 0):
    from diffusers import (
        AutoencoderKLQwenImage,
        FlowMatchEulerDiscreteScheduler,
        QwenImagePipeline,
        QwenImageTransformer2DModel,
    )
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    torch.manual_seed(seed)
    tok = make_qwen2_tokenizer(TEMPLATE, list(WORDS))
    ids = {
        k: tok.convert_tokens_to_ids(f"<|{k}|>")
        for k in ("vision_start", "vision_end", "vision_pad", "image_pad", "video_pad", "endoftext", "im_end")
    }
    config = Qwen2_5_VLConfig(  # deep copies: transformers writes into the nested rope_scaling dict
        text_config=dict(
            vocab_size=len(tok),
            bos_token_id=ids["endoftext"],
            eos_token_id=ids["im_end"],
            pad_token_id=ids["endoftext"],
            **copy.deepcopy(TEXT),
        ),
        vision_config=copy.deepcopy(VISION),
        vocab_size=len(tok),
        vision_start_token_id=ids["vision_start"],
        vision_end_token_id=ids["vision_end"],
        vision_token_id=ids["vision_pad"],
        image_token_id=ids["image_pad"],
        video_token_id=ids["video_pad"],
    )
    return QwenImagePipeline(
        transformer=QwenImageTransformer2DModel(**copy.deepcopy(TRANSFORMER)),
        vae=AutoencoderKLQwenImage(**copy.deepcopy(VAE)),
        scheduler=FlowMatchEulerDiscreteScheduler(**copy.deepcopy(SCHEDULER)),
        text_encoder=Qwen2_5_VLForConditionalGeneration(config).eval(),
        tokenizer=tok,
    )


def materialize_tiny_qwenimage(cache_dir: str | Path | None = None, seed: int = 0) -> Path:
    key = recipe_key(VERSION, seed, TEMPLATE, TRANSFORMER, VAE, TEXT, VISION, SCHEDULER, WORDS)
    return materialize("tiny_qwenimage", key, lambda: build_tiny_qwenimage_pipeline(seed), cache_dir)


class TinyQwenImageBackbone(TinyTwin, QwenImageBackbone):
    """``QwenImageBackbone`` over the tiny twin folder (built on first use)."""

    name = "tiny_qwenimage"
    materialize = staticmethod(materialize_tiny_qwenimage)
