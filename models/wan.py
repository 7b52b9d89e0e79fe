"""Wan2.1 text-to-video family adapter (``WanTransformer3DModel`` + UMT5-XXL + ``AutoencoderKLWan``), loaded with
diffusers' ``from_pretrained`` from a hub id or a local folder laid out like ``Wan-AI/Wan2.1-T2V-1.3B-Diffusers``
(or ``-14B-Diffusers``).

Conventions pinned by tests: the transformer takes the timestep in 0..1000 and the pipeline passes UniPC's int64
timesteps, so the adapter feeds ``min(floor(1000 sigma), 999)`` (``integer_timesteps``); latents are
``(16, 1 + (frames - 1) / 4, H/8, W/8)`` (the transformer patchifies 1x2x2 itself); prompts are UMT5 states cut at
the prompt length and zero-padded to ``max_sequence_length`` (the transformer attends to the zeros, as in the
pipeline); guidance is true CFG with a negative prompt in one batch-2B forward; the sigma grid is UniPC's flow
sigmas with a static ``flow_shift`` (3.0 for 480p, 5.0 for 720p), stepped with Euler as Flow-GRPO / Flash-GRPO do;
``decode`` returns frames ``(B, F, 3, H, W)``. The VAE runs in fp32 (as in diffusers' Wan examples).
"""
from __future__ import annotations

from typing import Sequence

import torch

from launcher.errors import ConfigError
from models.backbone import PromptEmbeds
from models.common import DiffusersBackbone

#: Flash-GRPO's Wan LoRA targets (the added-KV projections exist only in image-to-video checkpoints)
WAN_LORA_TARGETS = ("to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out")
WAN_COMPONENTS = ("transformer", "vae", "text_encoder", "tokenizer", "scheduler")


def wan_model_timestep(sigma: torch.Tensor, integer: bool = True) -> torch.Tensor:
    """Wan's timestep for noise level ``sigma`` (float64): UniPC's ``int64(1000 sigma)`` capped at 999 (the 1e-4
    absorbs float32 rounding of grids that sit exactly on multiples of 1/1000, e.g. DanceGRPO's quantised times);
    ``integer=False``: ``1000 sigma``."""
    t = sigma.double() * 1000.0
    return torch.floor(t + 1e-4).clamp(0, 999) if integer else t


class WanBackbone(DiffusersBackbone):
    """Wan2.1 T2V backbone.

    Args:
        path: hub id or local folder with ``transformer/ vae/ text_encoder/ tokenizer/ scheduler/``.
        height, width: frame size in pixels (multiples of ``vae_scale_factor_spatial * 2``).
        num_frames: frames per video, ``4k + 1`` (81 in the Wan2.1 / Flash-GRPO recipes; 1 = an image).
        guidance_scale: CFG scale (pipeline default 5.0, Flash-GRPO 4.5); ``<= 1`` disables CFG (one forward).
        negative_prompt: the unconditional prompt (the pipeline's and Flash-GRPO's default is ``""``).
        max_sequence_length: UMT5 tokens; embeddings are zero-padded to it (pipeline default 512).
        integer_timesteps: feed ``floor(1000 sigma)`` as UniPC's int64 timesteps (False: ``1000 sigma`` as float).
        Other arguments as :class:`models.flux.FluxBackbone`.
    """

    name = "wan2.1"
    family = "Wan2.1"
    hub_id = "Wan-AI/Wan2.1-T2V-1.3B-Diffusers"
    block_attrs = ("blocks",)
    parallelize_key = "wan"

    def __init__(self, path: str = hub_id, height: int = 480, width: int = 832, num_frames: int = 81,
                 guidance_scale: float = 5.0, negative_prompt: str = "", max_sequence_length: int = 512,
                 integer_timesteps: bool = True, finetune: str = "lora", lora_rank: int = 16,
                 lora_alpha: float = 32.0, lora_targets: Sequence[str] = WAN_LORA_TARGETS,
                 gradient_checkpointing: bool = False, keep_reference: bool = False, device: str = "auto",
                 dtype: str = "auto", name: str | None = None, prompt_cache_size: int | None = 4096,
                 text_encoders: str = "offload",
                 reference_dtype: str = "bfloat16", base_sharding: str = "shard"):
        import diffusers
        from diffusers import AutoencoderKLWan, WanPipeline, WanTransformer3DModel
        from transformers import AutoTokenizer, UMT5EncoderModel

        self._init_common(path, name, device, dtype, WAN_COMPONENTS, prompt_cache_size, text_encoders, finetune,
                          reference_dtype, base_sharding)
        self.height, self.width, self.num_frames = height, width, num_frames
        self.guidance_scale, self.negative_prompt = float(guidance_scale), negative_prompt
        self.max_sequence_length, self.integer_timesteps = max_sequence_length, integer_timesteps
        self.transformer = self._load_transformer(WanTransformer3DModel)
        self.vae = self._load(AutoencoderKLWan, "vae", torch_dtype=torch.float32).requires_grad_(False).eval()
        sched_cls = getattr(diffusers, self.loader.load_config(diffusers.UniPCMultistepScheduler, "scheduler")
                            .get("_class_name", "UniPCMultistepScheduler"))
        self.scheduler = self._load(sched_cls, "scheduler")
        self.pipe = WanPipeline(tokenizer=self._load(AutoTokenizer, "tokenizer"),
                                text_encoder=self._load_frozen(UMT5EncoderModel, "text_encoder"),
                                vae=self.vae, scheduler=self.scheduler, transformer=self.transformer)
        sf, tf = self.pipe.vae_scale_factor_spatial, self.pipe.vae_scale_factor_temporal
        p_t, p_h, p_w = self.transformer.config.patch_size
        if height % (sf * p_h) or width % (sf * p_w):
            raise ValueError(f"model.height/width must be multiples of {sf * p_h} for Wan (got {height}x{width})")
        if num_frames < 1 or (num_frames - 1) % tf:
            raise ConfigError(f"model.num_frames must be {tf}k + 1 for this VAE (e.g. 1, 5, 81; got {num_frames})")
        self._init_training(lora_rank, lora_alpha, lora_targets, keep_reference, gradient_checkpointing,
                            [self.pipe.text_encoder], self.vae)
        self._latent_shape = (self.transformer.config.in_channels, (num_frames - 1) // tf + 1, height // sf,
                              width // sf)
        z = self.vae.config.z_dim
        self._lat_mean = torch.tensor(self.vae.config.latents_mean, dtype=torch.float32).view(1, z, 1, 1, 1)
        self._lat_std = torch.tensor(self.vae.config.latents_std, dtype=torch.float32).view(1, z, 1, 1, 1)

    # -- conditioning -------------------------------------------------------------------------------------------
    def _encode(self, prompts: list[str]) -> list[dict[str, torch.Tensor]]:
        from diffusers.pipelines.wan.pipeline_wan import prompt_clean

        embeds, _ = self.pipe.encode_prompt(prompts, do_classifier_free_guidance=False, device=self.device,
                                            max_sequence_length=self.max_sequence_length)
        lengths = self.pipe.tokenizer([prompt_clean(p) for p in prompts], padding="max_length",
                                      max_length=self.max_sequence_length, truncation=True,
                                      return_attention_mask=True).attention_mask
        return [{"prompt_embeds": embeds[i, :sum(m)]} for i, m in enumerate(lengths)]   # zeros beyond: not stored

    def _pad(self, e: torch.Tensor) -> torch.Tensor:
        return torch.cat([e, e.new_zeros(self.max_sequence_length - e.shape[0], e.shape[1])])

    def encode_prompts(self, prompts: list[str]) -> PromptEmbeds:
        entries = self._encode_cached(prompts, self._encode)
        embeds = torch.stack([self._pad(e["prompt_embeds"].to(self.device)) for e in entries])
        shared = {}
        if self.do_cfg:
            shared = {"neg_prompt_embeds": self._pad(self._negative(self.negative_prompt, self._encode)
                                                     ["prompt_embeds"])[None]}
        return PromptEmbeds({"prompt_embeds": embeds}, shared)

    # -- latents ------------------------------------------------------------------------------------------------
    def model_timestep(self, sigma: torch.Tensor) -> torch.Tensor:
        return wan_model_timestep(sigma, self.integer_timesteps)

    def velocity(self, latents: torch.Tensor, sigma: torch.Tensor, embeds: PromptEmbeds) -> torch.Tensor:
        self._check_ready()
        b = latents.shape[0]
        enc = embeds.tensors["prompt_embeds"]
        x, t = latents, self.model_timestep(sigma).to(latents.dtype)
        if self.do_cfg:                                          # one forward over [uncond, cond]
            enc = torch.cat([embeds.shared["neg_prompt_embeds"].expand(b, -1, -1), enc])
            x, t = torch.cat([x, x]), torch.cat([t, t])
        with self._autocast():
            out = self._active(hidden_states=x, timestep=t, encoder_hidden_states=enc, return_dict=False)[0].float()
        if self.do_cfg:
            v_u, v_c = out.chunk(2)
            return self.cfg_combine(v_u, v_c, self.guidance_scale)
        return out

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """Frames ``(B, F, 3, H, W)`` in [0, 1]."""
        lat = latents * self._lat_std.to(latents.device) + self._lat_mean.to(latents.device)
        video = self.vae.decode(lat.to(self.vae.dtype), return_dict=False)[0]     # (B, 3, F, H, W)
        return (video.float() / 2 + 0.5).clamp(0, 1).permute(0, 2, 1, 3, 4)

    def encode_images(self, frames: torch.Tensor) -> torch.Tensor:
        """Frames (B, F, 3, H, W) in [0, 1] -> latents (the VAE posterior mean), the inverse of :meth:`decode`."""
        x = frames.to(self.device, self.vae.dtype).permute(0, 2, 1, 3, 4) * 2 - 1
        lat = self.vae.encode(x).latent_dist.mean.float()
        return (lat - self._lat_mean.to(lat.device)) / self._lat_std.to(lat.device)

    def scheduler_config(self) -> dict:
        return {"_class_name": type(self.scheduler).__name__, **dict(self.scheduler.config)}
