"""FLUX.1 family adapter (``FluxTransformer2DModel`` + CLIP-L + T5 + ``AutoencoderKL``), loaded with diffusers'
``from_pretrained`` from a hub id or a local folder laid out like ``black-forest-labs/FLUX.1-dev``.

Conventions pinned by tests: the transformer takes sigma in [0, 1] and multiplies by 1000 itself; latents are
2x2-packed tokens; FLUX.1-dev is guidance-distilled, so guidance goes through the ``guidance`` embedding (no CFG);
the pipeline's sigma grid is ``linspace(1, 1/N, N)`` with the resolution-dependent (dynamic) shift of its scheduler.
"""

from __future__ import annotations

import logging

import torch

from models.backbone import PromptEmbeds
from models.common import DiffusersBackbone
from models.flux_config import FluxModelConfig
from models.sigma_grids import custom_sigmas

log = logging.getLogger(__name__)

FLUX_COMPONENTS = ("transformer", "vae", "text_encoder", "text_encoder_2", "tokenizer", "tokenizer_2", "scheduler")


class FluxBackbone(DiffusersBackbone):
    """FLUX.1 backbone, built from its typed config (:class:`models.flux_config.FluxModelConfig`).

    ``cfg.path`` is a hub id or a local folder with ``transformer/ vae/ text_encoder/ text_encoder_2/ tokenizer/
    tokenizer_2/ scheduler/`` subfolders; ``keep_reference`` keeps the frozen pretrained policy for KL / adjoint
    methods (LoRA: the same module with the adapter disabled; full fine-tuning: a frozen copy). Under a process group
    of several ranks each rank reads only its shards of the transformer (docs/memory.md#sharded-start-up).
    """

    name = "flux"
    family = "FLUX.1"
    hub_id = "black-forest-labs/FLUX.1-dev"
    components = FLUX_COMPONENTS
    block_attrs = ("transformer_blocks", "single_transformer_blocks")
    guidance_attr = "guidance"  # distilled guidance, embedded (FLUX.1-dev has no CFG)

    def __init__(self, cfg: FluxModelConfig, keep_reference: bool = False):
        from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel
        from transformers import CLIPTextModel, CLIPTokenizer, T5EncoderModel, T5TokenizerFast

        self._init_common(cfg, FLUX_COMPONENTS)
        self.guidance, self.dynamic_shift = cfg.guidance, cfg.dynamic_shift
        self.transformer = self._load_transformer(FluxTransformer2DModel)
        self.vae = self._load_frozen(AutoencoderKL, "vae")
        self.scheduler = self._load(FlowMatchEulerDiscreteScheduler, "scheduler")
        # The pipeline object is only a holder for diffusers' own prompt-encoding and packing code.
        self.pipe = FluxPipeline(
            scheduler=self.scheduler,
            vae=self.vae,
            transformer=self.transformer,
            text_encoder=self._load_frozen(CLIPTextModel, "text_encoder"),
            text_encoder_2=self._load_frozen(T5EncoderModel, "text_encoder_2"),
            tokenizer=self._load(CLIPTokenizer, "tokenizer"),
            tokenizer_2=self._load(T5TokenizerFast, "tokenizer_2"),
        )
        sf = self.pipe.vae_scale_factor
        self._require_image_size(2 * sf)
        self._init_training(keep_reference, [self.pipe.text_encoder, self.pipe.text_encoder_2], self.vae)
        height, width = self.height, self.width
        self._lat_h, self._lat_w = 2 * (height // (sf * 2)), 2 * (width // (sf * 2))
        c = self.transformer.config.in_channels
        self._latent_shape = ((self._lat_h // 2) * (self._lat_w // 2), c)
        self._img_ids = FluxPipeline._prepare_latent_image_ids(
            1, self._lat_h // 2, self._lat_w // 2, self.device, self.dtype
        )

    # -- conditioning -------------------------------------------------------------------------------------------
    def _encode(self, prompts: list[str]) -> list[dict[str, torch.Tensor]]:
        embeds, pooled, _ = self.pipe.encode_prompt(
            prompts, prompt_2=None, device=self.device, max_sequence_length=self.max_sequence_length
        )
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
        t = self.model_timestep(sigma.to(latents.dtype))
        with self._autocast():
            out = model(
                hidden_states=latents,
                timestep=t,
                guidance=guidance,
                pooled_projections=embeds.tensors["pooled"],
                encoder_hidden_states=embeds.tensors["prompt_embeds"],
                txt_ids=embeds.shared["txt_ids"],
                img_ids=self._img_ids,
                return_dict=False,
            )[0]
        return out.float()

    def model_timestep(self, sigma: torch.Tensor) -> torch.Tensor:
        return sigma  # FluxTransformer2DModel multiplies by 1000 itself

    def pipeline_kwargs(self) -> dict:
        return dict(
            height=self.height,
            width=self.width,
            max_sequence_length=self.max_sequence_length,
            guidance_scale=self.guidance,
        )

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

    def sigmas(self, num_steps: int, shift: float) -> torch.Tensor:
        """FluxPipeline's grid: ``linspace(1, 1/N, N)`` with the resolution-dependent shift (``dynamic_shift``)."""
        return custom_sigmas(num_steps, shift, dict(self.scheduler.config), self._latent_shape[0], self.dynamic_shift)
