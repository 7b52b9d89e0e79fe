"""Stable Diffusion 3.5 family adapter (``SD3Transformer2DModel`` MMDiT(-X) + CLIP-L + CLIP-G + T5-XXL +
``AutoencoderKL``), loaded with diffusers' ``from_pretrained`` from a hub id or a local folder laid out like
``stabilityai/stable-diffusion-3.5-medium``.

Conventions pinned by tests: the transformer takes the timestep ``1000 sigma`` (the pipeline passes
``scheduler.timesteps`` as they are); latents are unpacked ``(C, H/8, W/8)`` (the transformer patchifies itself);
guidance is true classifier-free guidance with a negative prompt, evaluated as one batch-2B forward
``[uncond, cond]``; the sigma grid is the scheduler's static shift (3.0), ``set_timesteps(N)``.
"""

from __future__ import annotations

import torch

from models.backbone import PromptEmbeds
from models.common import DiffusersBackbone
from models.sd3_config import SD3ModelConfig

#: Flow-GRPO's SD3.5 LoRA targets (joint attention, both streams)
SD3_COMPONENTS = (
    "transformer",
    "vae",
    "text_encoder",
    "text_encoder_2",
    "text_encoder_3",
    "tokenizer",
    "tokenizer_2",
    "tokenizer_3",
    "scheduler",
)


class SD3Backbone(DiffusersBackbone):
    """SD3.5 backbone, built from its typed config (:class:`models.sd3_config.SD3ModelConfig`): ``cfg.path`` holds
    ``transformer/ vae/ text_encoder{,_2,_3}/ tokenizer{,_2,_3}/ scheduler/``; CFG ``v = v_u + w (v_c - v_u)`` with
    ``w = cfg.guidance_scale`` and the unconditional ``cfg.negative_prompt`` (``w <= 1`` disables it: one forward).
    ``keep_reference`` as :class:`models.flux.FluxBackbone`.
    """

    name = "sd35m"
    family = "SD3.5"
    hub_id = "stabilityai/stable-diffusion-3.5-medium"
    components = SD3_COMPONENTS
    block_attrs = ("transformer_blocks",)

    def __init__(self, cfg: SD3ModelConfig, keep_reference: bool = False):
        from diffusers import (
            AutoencoderKL,
            FlowMatchEulerDiscreteScheduler,
            SD3Transformer2DModel,
            StableDiffusion3Pipeline,
        )
        from transformers import CLIPTextModelWithProjection, CLIPTokenizer, T5EncoderModel, T5TokenizerFast

        self._init_common(cfg, SD3_COMPONENTS)
        self.guidance_scale, self.negative_prompt = float(cfg.guidance_scale), cfg.negative_prompt
        self.transformer = self._load_transformer(SD3Transformer2DModel)
        self.vae = self._load_frozen(AutoencoderKL, "vae")
        self.scheduler = self._load(FlowMatchEulerDiscreteScheduler, "scheduler")
        self.pipe = StableDiffusion3Pipeline(
            transformer=self.transformer,
            scheduler=self.scheduler,
            vae=self.vae,
            text_encoder=self._load_frozen(CLIPTextModelWithProjection, "text_encoder"),
            text_encoder_2=self._load_frozen(CLIPTextModelWithProjection, "text_encoder_2"),
            text_encoder_3=self._load_frozen(T5EncoderModel, "text_encoder_3"),
            tokenizer=self._load(CLIPTokenizer, "tokenizer"),
            tokenizer_2=self._load(CLIPTokenizer, "tokenizer_2"),
            tokenizer_3=self._load(T5TokenizerFast, "tokenizer_3"),
        )
        sf, patch = self.pipe.vae_scale_factor, self.transformer.config.patch_size
        self._require_image_size(sf * patch)
        self._init_training(
            keep_reference, [self.pipe.text_encoder, self.pipe.text_encoder_2, self.pipe.text_encoder_3], self.vae
        )
        self._latent_shape = (self.transformer.config.in_channels, self.height // sf, self.width // sf)

    # -- conditioning -------------------------------------------------------------------------------------------
    def _encode(self, prompts: list[str]) -> list[dict[str, torch.Tensor]]:
        embeds, _, pooled, _ = self.pipe.encode_prompt(
            prompt=prompts,
            prompt_2=None,
            prompt_3=None,
            device=self.device,
            do_classifier_free_guidance=False,
            max_sequence_length=self.max_sequence_length,
        )
        return [{"prompt_embeds": embeds[i], "pooled": pooled[i]} for i in range(len(prompts))]

    def encode_prompts(self, prompts: list[str]) -> PromptEmbeds:
        entries = self._encode_cached(prompts, self._encode)
        tensors = {k: torch.stack([e[k] for e in entries]).to(self.device) for k in ("prompt_embeds", "pooled")}
        shared = {}
        if self.do_cfg:
            neg = self._negative(self.negative_prompt, self._encode)
            shared = {"neg_prompt_embeds": neg["prompt_embeds"][None], "neg_pooled": neg["pooled"][None]}
        return PromptEmbeds(tensors, shared)

    # -- latents ------------------------------------------------------------------------------------------------
    def velocity(self, latents: torch.Tensor, sigma: torch.Tensor, embeds: PromptEmbeds) -> torch.Tensor:
        self._check_ready()
        shared = embeds.shared
        return self.guided_velocity(
            latents,
            self.model_timestep(sigma.to(latents.dtype)),
            cond={
                "encoder_hidden_states": embeds.tensors["prompt_embeds"],
                "pooled_projections": embeds.tensors["pooled"],
            },
            uncond={
                "encoder_hidden_states": shared.get("neg_prompt_embeds"),
                "pooled_projections": shared.get("neg_pooled"),
            },
        )

    def model_timestep(self, sigma: torch.Tensor) -> torch.Tensor:
        return sigma * 1000.0  # SD3's timestep scale: 0..1000, as the pipeline's scheduler.timesteps

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        lat = latents / self.vae.config.scaling_factor + self.vae.config.shift_factor
        image = self.vae.decode(lat.to(self.vae.dtype), return_dict=False)[0]
        return (image.float() / 2 + 0.5).clamp(0, 1)

    def encode_images(self, images: torch.Tensor) -> torch.Tensor:
        """Images (B, 3, H, W) in [0, 1] -> latents (the VAE posterior mean), the inverse of :meth:`decode`."""
        lat = self.vae.encode(images.to(self.device, self.vae.dtype) * 2 - 1).latent_dist.mean
        return ((lat - self.vae.config.shift_factor) * self.vae.config.scaling_factor).float()
