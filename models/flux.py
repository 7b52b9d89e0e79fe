"""FLUX.1 family adapter (``FluxTransformer2DModel`` + CLIP-L + T5 + ``AutoencoderKL``), loaded with diffusers'
``from_pretrained`` from a hub id or a local folder laid out like ``black-forest-labs/FLUX.1-dev``.

Conventions pinned by tests: the transformer takes sigma in [0, 1] and multiplies by 1000 itself; latents are
2x2-packed tokens; FLUX.1-dev is guidance-distilled, so guidance goes through the ``guidance`` embedding (no CFG);
the pipeline's sigma grid is ``linspace(1, 1/N, N)`` with the resolution-dependent (dynamic) shift of its scheduler.
"""
from __future__ import annotations

import logging
from typing import Sequence

import torch

from models.backbone import PromptEmbeds
from models.common import DiffusersBackbone

log = logging.getLogger(__name__)

FLUX_LORA_TARGETS = ("to_q", "to_k", "to_v", "to_out.0")
FLUX_COMPONENTS = ("transformer", "vae", "text_encoder", "text_encoder_2", "tokenizer", "tokenizer_2", "scheduler")


def pipeline_sigma_keys(image_seq_len: int, dynamic_shift: bool) -> dict:
    """Private scheduler-config keys (ignored by diffusers' ``from_config``) that tell
    :func:`methods.schedule.scheduler_sigmas` how the family's pipeline calls ``set_timesteps``: custom sigmas
    ``linspace(1, 1/N, N)`` and, with dynamic shifting, ``mu`` from the image token count."""
    keys = {"_rewardflow_custom_sigmas": True, "_rewardflow_image_seq_len": int(image_seq_len)}
    if not dynamic_shift:
        keys["use_dynamic_shifting"] = False
    return keys


class FluxBackbone(DiffusersBackbone):
    """FLUX.1 backbone.

    Args:
        path: hub id or local folder with ``transformer/ vae/ text_encoder/ text_encoder_2/ tokenizer/ tokenizer_2/
            scheduler/`` subfolders.
        height, width: image size in pixels (multiples of ``2 * vae_scale_factor``).
        guidance: distilled guidance value for models with ``guidance_embeds`` (FLUX.1-dev: 3.5).
        max_sequence_length: T5 tokens.
        finetune: ``full`` (all transformer weights) or ``lora`` (peft adapter on ``lora_targets``).
        keep_reference: keep the frozen pretrained policy for KL / adjoint methods (LoRA: the same module with the
            adapter disabled; full fine-tuning: a frozen copy).
        dynamic_shift: use the scheduler's resolution-dependent shift (``use_dynamic_shifting``) for
            ``method.schedule=scheduler`` as FluxPipeline does; ``False`` uses ``method.shift`` statically.
        prompt_cache_size: prompts whose embeddings are kept (least recently used are dropped).
        text_encoders: ``offload`` (on the CPU, moved over to encode new prompts), ``device`` (kept on the
            accelerator) or ``precompute`` (every training prompt encoded once at start, cached on disk, encoders
            freed); docs/memory.md#text-conditioning.
        reference_dtype: storage dtype of the full-fine-tuning reference copy (computed in the compute dtype).
        base_sharding: LoRA only: ``shard`` the frozen base across ranks or ``replicate`` it (no all-gather).
        device, dtype: ``auto`` = CUDA + bf16 when available, else CPU + fp32.
    """

    name = "flux"
    family = "FLUX.1"
    hub_id = "black-forest-labs/FLUX.1-dev"
    block_attrs = ("transformer_blocks", "single_transformer_blocks")
    parallelize_key = "flux"

    def __init__(self, path: str, height: int = 512, width: int = 512, guidance: float = 3.5,
                 max_sequence_length: int = 512, finetune: str = "lora", lora_rank: int = 32,
                 lora_alpha: float = 64.0, lora_targets: Sequence[str] = FLUX_LORA_TARGETS,
                 gradient_checkpointing: bool = False, keep_reference: bool = False, device: str = "auto",
                 dtype: str = "auto", name: str | None = None, dynamic_shift: bool = True,
                 prompt_cache_size: int | None = 4096, text_encoders: str = "offload",
                 reference_dtype: str = "bfloat16", base_sharding: str = "shard"):
        from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel
        from transformers import CLIPTextModel, CLIPTokenizer, T5EncoderModel, T5TokenizerFast

        self._init_common(path, name, device, dtype, FLUX_COMPONENTS, prompt_cache_size, text_encoders, finetune,
                          reference_dtype, base_sharding)
        self.height, self.width, self.guidance = height, width, guidance
        self.max_sequence_length = max_sequence_length
        self.dynamic_shift = dynamic_shift
        self.transformer = self._load_transformer(FluxTransformer2DModel)
        self.vae = self._load_frozen(AutoencoderKL, "vae")
        self.scheduler = self._load(FlowMatchEulerDiscreteScheduler, "scheduler")
        # The pipeline object is only a holder for diffusers' own prompt-encoding and packing code.
        self.pipe = FluxPipeline(
            scheduler=self.scheduler, vae=self.vae, transformer=self.transformer,
            text_encoder=self._load_frozen(CLIPTextModel, "text_encoder"),
            text_encoder_2=self._load_frozen(T5EncoderModel, "text_encoder_2"),
            tokenizer=self._load(CLIPTokenizer, "tokenizer"),
            tokenizer_2=self._load(T5TokenizerFast, "tokenizer_2"))
        sf = self.pipe.vae_scale_factor
        if height % (2 * sf) or width % (2 * sf):
            raise ValueError(f"model.height/width must be multiples of {2 * sf} for this VAE "
                             f"(got {height}x{width})")
        self._init_training(lora_rank, lora_alpha, lora_targets, keep_reference, gradient_checkpointing,
                            [self.pipe.text_encoder, self.pipe.text_encoder_2], self.vae)
        self._lat_h, self._lat_w = 2 * (height // (sf * 2)), 2 * (width // (sf * 2))
        c = self.transformer.config.in_channels
        self._latent_shape = ((self._lat_h // 2) * (self._lat_w // 2), c)
        self._img_ids = FluxPipeline._prepare_latent_image_ids(1, self._lat_h // 2, self._lat_w // 2,
                                                               self.device, self.dtype)

    # -- conditioning -------------------------------------------------------------------------------------------
    def _encode(self, prompts: list[str]) -> list[dict[str, torch.Tensor]]:
        embeds, pooled, _ = self.pipe.encode_prompt(prompts, prompt_2=None, device=self.device,
                                                    max_sequence_length=self.max_sequence_length)
        return [{"prompt_embeds": embeds[i], "pooled": pooled[i]} for i in range(len(prompts))]

    def encode_prompts(self, prompts: list[str]) -> PromptEmbeds:
        entries = self._encode_cached(prompts, self._encode)
        tensors = {k: torch.stack([e[k] for e in entries]).to(self.device) for k in ("prompt_embeds", "pooled")}
        text_len = tensors["prompt_embeds"].shape[1]
        txt_ids = torch.zeros(text_len, 3, device=self.device, dtype=self.dtype)
        return PromptEmbeds(tensors, {"txt_ids": txt_ids})

    # -- latents ------------------------------------------------------------------------------------------------
    def velocity(self, latents: torch.Tensor, sigma: torch.Tensor, embeds: PromptEmbeds) -> torch.Tensor:
        self._check_ready()
        b = latents.shape[0]
        model = self._active
        guidance = None
        if model.config.guidance_embeds:
            guidance = torch.full((b,), self.guidance, device=self.device, dtype=torch.float32)
        with self._autocast():
            out = model(hidden_states=latents, timestep=sigma.to(latents.dtype), guidance=guidance,
                        pooled_projections=embeds.tensors["pooled"],
                        encoder_hidden_states=embeds.tensors["prompt_embeds"],
                        txt_ids=embeds.shared["txt_ids"], img_ids=self._img_ids, return_dict=False)[0]
        return out.float()

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        from diffusers import FluxPipeline

        sf = self.pipe.vae_scale_factor
        lat = FluxPipeline._unpack_latents(latents, self.height, self.width, sf)
        lat = lat / self.vae.config.scaling_factor + self.vae.config.shift_factor
        image = self.vae.decode(lat.to(self.vae.dtype), return_dict=False)[0]
        return (image.float() / 2 + 0.5).clamp(0, 1)

    def encode_images(self, images: torch.Tensor) -> torch.Tensor:
        """Images (B, 3, H, W) in [0, 1] -> packed latents (the VAE posterior mean), the inverse of :meth:`decode`."""
        from diffusers import FluxPipeline

        lat = self.vae.encode(images.to(self.device, self.vae.dtype) * 2 - 1).latent_dist.mean
        lat = (lat - self.vae.config.shift_factor) * self.vae.config.scaling_factor
        b, c, h, w = lat.shape
        return FluxPipeline._pack_latents(lat, b, c, h, w).float()

    def scheduler_config(self) -> dict:
        return {**dict(self.scheduler.config), **pipeline_sigma_keys(self._latent_shape[0], self.dynamic_shift)}
