"""The four families' published transformer configs, as diffusers' constructor arguments. Plain data (no torch
import), so the memory planner (``launcher/plan/memory_plan.py``) reads them in a fraction of a second; the GPU check and
the benches build the models from them (``models/real_transformers.py``).
"""

from __future__ import annotations

from typing import Any

# FLUX.1-dev. black-forest-labs/flux, src/flux/util.py, configs["flux-dev"]: depth 19, depth_single_blocks 38,
# hidden_size 3072 = num_heads 24 x 128, context_in_dim 4096 (T5-XXL), vec_in_dim 768 (CLIP-L pooled),
# axes_dim [16, 56, 56], guidance_embed True, in_channels 64 (16 latent channels packed 2x2). Mapped to diffusers'
# names as in diffusers scripts/convert_flux_to_diffusers.py (num_layers 19, num_single_layers 38, inner_dim 3072).
# 11.9 B parameters.
FLUX_DEV: dict[str, Any] = dict(
    patch_size=1,
    in_channels=64,
    num_layers=19,
    num_single_layers=38,
    attention_head_dim=128,
    num_attention_heads=24,
    joint_attention_dim=4096,
    pooled_projection_dim=768,
    guidance_embeds=True,
    axes_dims_rope=(16, 56, 56),
)
# Stable Diffusion 3.5 Medium. stabilityai/stable-diffusion-3.5-medium transformer/config.json (copied verbatim into
# fine-tunes, e.g. huggingface.co/Prgckwb/trpfrog-sd3.5-medium transformer/config.json, whose _name_or_path is the
# official snapshot): 24 layers of 24 heads x 64, caption_projection_dim 1536, joint 4096, pooled 2048,
# pos_embed_max_size 384, dual_attention_layers 0-12 (MMDiT-X), qk_norm rms_norm. diffusers
# scripts/convert_sd3_to_diffusers.py derives the same: "(0, ..., 12) for sd3.5", rms qk-norm, 384 for the 2B model.
# 2.2 B parameters.
SD35_MEDIUM: dict[str, Any] = dict(
    sample_size=128,
    patch_size=2,
    in_channels=16,
    num_layers=24,
    attention_head_dim=64,
    num_attention_heads=24,
    joint_attention_dim=4096,
    caption_projection_dim=1536,
    pooled_projection_dim=2048,
    out_channels=16,
    pos_embed_max_size=384,
    dual_attention_layers=tuple(range(13)),
    qk_norm="rms_norm",
)
# Qwen-Image. Qwen/Qwen-Image transformer/config.json, which equals the defaults documented for diffusers'
# QwenImageTransformer2DModel (huggingface.co/docs/diffusers/api/models/qwenimage_transformer2d): 60 dual-stream
# blocks of 24 heads x 128, joint_attention_dim 3584 (Qwen2.5-VL-7B's hidden size), in 64 / out 16 channels,
# axes_dims_rope (16, 56, 56), no guidance embedding. 20.4 B parameters.
QWEN_IMAGE: dict[str, Any] = dict(
    patch_size=2,
    in_channels=64,
    out_channels=16,
    num_layers=60,
    attention_head_dim=128,
    num_attention_heads=24,
    joint_attention_dim=3584,
    guidance_embeds=False,
    axes_dims_rope=(16, 56, 56),
)
# Wan2.1 T2V 1.3B (Wan-AI/Wan2.1-T2V-1.3B-Diffusers, this project's default model.path). diffusers
# scripts/convert_wan_to_diffusers.py, model_type "Wan-T2V-1.3B": 30 layers of 12 heads x 128, ffn_dim 8960,
# text_dim 4096 (UMT5-XXL), freq_dim 256, cross_attn_norm, qk_norm rms_norm_across_heads, eps 1e-6. 1.4 B parameters.
WAN21_T2V_1_3B: dict[str, Any] = dict(
    patch_size=(1, 2, 2),
    num_attention_heads=12,
    attention_head_dim=128,
    in_channels=16,
    out_channels=16,
    text_dim=4096,
    freq_dim=256,
    ffn_dim=8960,
    num_layers=30,
    cross_attn_norm=True,
    qk_norm="rms_norm_across_heads",
    eps=1e-6,
    added_kv_proj_dim=None,
)
# Wan2.1 T2V 14B (Wan-AI/Wan2.1-T2V-14B-Diffusers). diffusers scripts/convert_wan_to_diffusers.py, model_type
# "Wan-T2V-14B": 40 layers of 40 heads x 128, ffn_dim 13824, the rest as 1.3B. 14.3 B parameters.
WAN21_T2V_14B: dict[str, Any] = dict(WAN21_T2V_1_3B, num_attention_heads=40, ffn_dim=13824, num_layers=40)

# VAEs. FLUX.1-dev and SD3.5 share the 16-channel AutoencoderKL architecture (their vae/config.json: block_out_channels
# 128, 256, 512, 512, two layers per block, 32 norm groups, no quant convs; 83.8 M parameters). Qwen-Image's
# AutoencoderKLQwenImage and Wan2.1's AutoencoderKLWan are diffusers' defaults for those classes (base_dim 96,
# dim_mult 1, 2, 4, 4, z_dim 16; 126.9 M parameters).
FLUX_VAE: dict[str, Any] = dict(
    in_channels=3,
    out_channels=3,
    latent_channels=16,
    block_out_channels=(128, 256, 512, 512),
    down_block_types=("DownEncoderBlock2D",) * 4,
    up_block_types=("UpDecoderBlock2D",) * 4,
    layers_per_block=2,
    norm_num_groups=32,
    use_quant_conv=False,
    use_post_quant_conv=False,
)
QWEN_IMAGE_VAE: dict = {}
WAN21_VAE: dict = {}
