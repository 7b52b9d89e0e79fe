"""Stable Diffusion 3.5 family adapter (``SD3Transformer2DModel`` MMDiT(-X) + CLIP-L + CLIP-G + T5-XXL +
``AutoencoderKL``), loaded with diffusers' ``from_pretrained`` from a hub id or a local folder laid out like
``stabilityai/stable-diffusion-3.5-medium``.

Conventions pinned by tests: the transformer takes the timestep ``1000 sigma`` (the pipeline passes
``scheduler.timesteps`` as they are); latents are unpacked ``(C, H/8, W/8)`` (the transformer patchifies itself);
guidance is true classifier-free guidance with a negative prompt, evaluated as one batch-2B forward
``[uncond, cond]``; the sigma grid is the scheduler's static shift (3.0), ``set_timesteps(N)``.
"""
from __future__ import annotations

from typing import Sequence

import torch

from models.backbone import PromptEmbeds
from models.common import DiffusersBackbone

#: Flow-GRPO's SD3.5 LoRA targets (joint attention, both streams)
SD3_LORA_TARGETS = ("to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out")
SD3_COMPONENTS = ("transformer", "vae", "text_encoder", "text_encoder_2", "text_encoder_3", "tokenizer",
                  "tokenizer_2", "tokenizer_3", "scheduler")


class SD3Backbone(DiffusersBackbone):
    """SD3.5 backbone.

    Args:
        path: hub id or local folder with ``transformer/ vae/ text_encoder{,_2,_3}/ tokenizer{,_2,_3}/ scheduler/``.
        height, width: image size in pixels (multiples of ``vae_scale_factor * patch_size``).
        guidance_scale: CFG scale ``w`` (``v = v_u + w (v_c - v_u)``); ``<= 1`` disables CFG (one forward).
        negative_prompt: the unconditional prompt of CFG (the pipeline's default is ``""``).
        max_sequence_length: T5 tokens (the pipeline's default 256).
        Other arguments as :class:`models.flux.FluxBackbone`.
    """

    name = "sd35m"
    family = "SD3.5"
    hub_id = "stabilityai/stable-diffusion-3.5-medium"
    block_attrs = ("transformer_blocks",)
    parallelize_key = "sd3"

    def __init__(self, path: str = hub_id, height: int = 512, width: int = 512, guidance_scale: float = 4.5,
                 negative_prompt: str = "", max_sequence_length: int = 256, finetune: str = "lora",
                 lora_rank: int = 32, lora_alpha: float = 64.0, lora_targets: Sequence[str] = SD3_LORA_TARGETS,
                 gradient_checkpointing: bool = False, keep_reference: bool = False, device: str = "auto",
                 dtype: str = "auto", name: str | None = None, prompt_cache_size: int | None = 4096,
                 text_encoders: str = "offload",
                 reference_dtype: str = "bfloat16", base_sharding: str = "shard"):
        from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel
        from diffusers import StableDiffusion3Pipeline
        from transformers import CLIPTextModelWithProjection, CLIPTokenizer, T5EncoderModel, T5TokenizerFast

        self._init_common(path, name, device, dtype, SD3_COMPONENTS, prompt_cache_size, text_encoders, finetune,
                          reference_dtype, base_sharding)
        self.height, self.width = height, width
        self.guidance_scale, self.negative_prompt = float(guidance_scale), negative_prompt
        self.max_sequence_length = max_sequence_length
        self.transformer = self._load_transformer(SD3Transformer2DModel)
        self.vae = self._load_frozen(AutoencoderKL, "vae")
        self.scheduler = self._load(FlowMatchEulerDiscreteScheduler, "scheduler")
        self.pipe = StableDiffusion3Pipeline(
            transformer=self.transformer, scheduler=self.scheduler, vae=self.vae,
            text_encoder=self._load_frozen(CLIPTextModelWithProjection, "text_encoder"),
            text_encoder_2=self._load_frozen(CLIPTextModelWithProjection, "text_encoder_2"),
            text_encoder_3=self._load_frozen(T5EncoderModel, "text_encoder_3"),
            tokenizer=self._load(CLIPTokenizer, "tokenizer"), tokenizer_2=self._load(CLIPTokenizer, "tokenizer_2"),
            tokenizer_3=self._load(T5TokenizerFast, "tokenizer_3"))
        sf, patch = self.pipe.vae_scale_factor, self.transformer.config.patch_size
        if height % (sf * patch) or width % (sf * patch):
            raise ValueError(f"model.height/width must be multiples of {sf * patch} (VAE factor {sf} x patch {patch}); "
                             f"got {height}x{width}")
        self._init_training(lora_rank, lora_alpha, lora_targets, keep_reference, gradient_checkpointing,
                            [self.pipe.text_encoder, self.pipe.text_encoder_2, self.pipe.text_encoder_3], self.vae)
        self._latent_shape = (self.transformer.config.in_channels, height // sf, width // sf)

    # -- conditioning -------------------------------------------------------------------------------------------
    def _encode(self, prompts: list[str]) -> list[dict[str, torch.Tensor]]:
        embeds, _, pooled, _ = self.pipe.encode_prompt(prompt=prompts, prompt_2=None, prompt_3=None,
                                                       device=self.device, do_classifier_free_guidance=False,
                                                       max_sequence_length=self.max_sequence_length)
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
        b = latents.shape[0]
        enc, pooled = embeds.tensors["prompt_embeds"], embeds.tensors["pooled"]
        x, t = latents, sigma.to(latents.dtype) * 1000.0          # SD3 timestep scale: 0..1000
        if self.do_cfg:                                           # one forward over [uncond, cond]
            enc = torch.cat([embeds.shared["neg_prompt_embeds"].expand(b, -1, -1), enc])
            pooled = torch.cat([embeds.shared["neg_pooled"].expand(b, -1), pooled])
            x, t = torch.cat([x, x]), torch.cat([t, t])
        with self._autocast():
            out = self._active(hidden_states=x, timestep=t, encoder_hidden_states=enc, pooled_projections=pooled,
                               return_dict=False)[0].float()
        if self.do_cfg:
            v_u, v_c = out.chunk(2)
            return self.cfg_combine(v_u, v_c, self.guidance_scale)
        return out

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        lat = latents / self.vae.config.scaling_factor + self.vae.config.shift_factor
        image = self.vae.decode(lat.to(self.vae.dtype), return_dict=False)[0]
        return (image.float() / 2 + 0.5).clamp(0, 1)

    def encode_images(self, images: torch.Tensor) -> torch.Tensor:
        """Images (B, 3, H, W) in [0, 1] -> latents (the VAE posterior mean), the inverse of :meth:`decode`."""
        lat = self.vae.encode(images.to(self.device, self.vae.dtype) * 2 - 1).latent_dist.mean
        return ((lat - self.vae.config.shift_factor) * self.vae.config.scaling_factor).float()

    def scheduler_config(self) -> dict:
        return dict(self.scheduler.config)
