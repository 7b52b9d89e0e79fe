"""Qwen-Image family adapter (``QwenImageTransformer2DModel`` MMDiT + Qwen2.5-VL text encoder +
``AutoencoderKLQwenImage``), loaded with diffusers' ``from_pretrained`` from a hub id or a local folder laid out like
``Qwen/Qwen-Image``.

Conventions pinned by tests: the transformer takes sigma in [0, 1] (``Timesteps(scale=1000)`` inside; the pipeline
passes ``t / 1000``); latents are 2x2-packed tokens ``(S, 4 z)`` and ``img_shapes`` gives the token grid; prompts go
through the pipeline's chat template (its first 34 tokens dropped) and are padded with a text mask, so padding is
exact; guidance is true CFG with a negative prompt (one batch-2B forward) followed by the pipeline's per-token
rescale to the conditional prediction's norm; the sigma grid is ``linspace(1, 1/N, N)`` with the resolution-dependent
shift; the VAE works on single-frame videos and is unnormalised with ``latents_mean`` / ``latents_std``.
"""
from __future__ import annotations

from typing import Sequence

import torch

from launcher.errors import ConfigError
from models.backbone import PromptEmbeds
from models.common import DiffusersBackbone
from models.flux import pipeline_sigma_keys

QWEN_LORA_TARGETS = ("to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out")
QWEN_COMPONENTS = ("transformer", "vae", "text_encoder", "tokenizer", "scheduler")


class QwenImageBackbone(DiffusersBackbone):
    """Qwen-Image backbone.

    Args:
        path: hub id or local folder with ``transformer/ vae/ text_encoder/ tokenizer/ scheduler/``.
        height, width: image size in pixels (multiples of ``2 * vae_scale_factor``).
        guidance_scale: true-CFG scale (the pipeline's ``true_cfg_scale``); ``<= 1`` disables CFG (one forward).
        negative_prompt: the unconditional prompt (the Qwen-Image model card uses ``" "``).
        cfg_renorm: rescale the CFG velocity per token to the conditional velocity's norm, as QwenImagePipeline does.
        max_sequence_length: text tokens kept after the template (the pipeline's default 512; at most 1024).
        dynamic_shift: resolution-dependent shift for ``method.schedule=scheduler`` (as the pipeline).
        Other arguments as :class:`models.flux.FluxBackbone`.
    """

    name = "qwenimage"
    family = "Qwen-Image"
    hub_id = "Qwen/Qwen-Image"
    block_attrs = ("transformer_blocks",)
    parallelize_key = "qwenimage"

    def __init__(self, path: str = hub_id, height: int = 512, width: int = 512, guidance_scale: float = 4.0,
                 negative_prompt: str = " ", cfg_renorm: bool = True, max_sequence_length: int = 512,
                 finetune: str = "lora", lora_rank: int = 32, lora_alpha: float = 64.0,
                 lora_targets: Sequence[str] = QWEN_LORA_TARGETS, gradient_checkpointing: bool = False,
                 keep_reference: bool = False, device: str = "auto", dtype: str = "auto", name: str | None = None,
                 dynamic_shift: bool = True, prompt_cache_size: int | None = 4096,
                 text_encoders: str = "offload",
                 reference_dtype: str = "bfloat16", base_sharding: str = "shard"):
        from diffusers import (AutoencoderKLQwenImage, FlowMatchEulerDiscreteScheduler, QwenImagePipeline,
                               QwenImageTransformer2DModel)
        from transformers import Qwen2_5_VLForConditionalGeneration, Qwen2Tokenizer

        if not 1 <= max_sequence_length <= 1024:
            raise ConfigError(f"model.max_sequence_length must be in [1, 1024] for Qwen-Image "
                              f"(got {max_sequence_length})")
        self._init_common(path, name, device, dtype, QWEN_COMPONENTS, prompt_cache_size, text_encoders, finetune,
                          reference_dtype, base_sharding)
        self.height, self.width = height, width
        self.guidance_scale, self.negative_prompt = float(guidance_scale), negative_prompt
        self.cfg_renorm, self.max_sequence_length = cfg_renorm, max_sequence_length
        self.dynamic_shift = dynamic_shift
        self.transformer = self._load_transformer(QwenImageTransformer2DModel)
        if self.transformer.config.guidance_embeds:
            raise ConfigError(f"model.path={path!r}: guidance-distilled Qwen-Image transformers (guidance_embeds=True) "
                              f"are not supported; use the base Qwen-Image checkpoint")
        self.vae = self._load_frozen(AutoencoderKLQwenImage, "vae")
        self.scheduler = self._load(FlowMatchEulerDiscreteScheduler, "scheduler")
        self.pipe = QwenImagePipeline(
            transformer=self.transformer, scheduler=self.scheduler, vae=self.vae,
            text_encoder=self._load_frozen(Qwen2_5_VLForConditionalGeneration, "text_encoder"),
            tokenizer=self._load(Qwen2Tokenizer, "tokenizer"))
        sf = self.pipe.vae_scale_factor
        if height % (2 * sf) or width % (2 * sf):
            raise ValueError(f"model.height/width must be multiples of {2 * sf} for this VAE (got {height}x{width})")
        self._init_training(lora_rank, lora_alpha, lora_targets, keep_reference, gradient_checkpointing,
                            [self.pipe.text_encoder], self.vae)
        self._grid = (height // sf // 2, width // sf // 2)
        self._latent_shape = (self._grid[0] * self._grid[1], self.transformer.config.in_channels)
        z = self.vae.config.z_dim
        self._lat_mean = torch.tensor(self.vae.config.latents_mean, dtype=torch.float32).view(1, z, 1, 1, 1)
        self._lat_std = torch.tensor(self.vae.config.latents_std, dtype=torch.float32).view(1, z, 1, 1, 1)

    # -- conditioning -------------------------------------------------------------------------------------------
    def _encode(self, prompts: list[str]) -> list[dict[str, torch.Tensor]]:
        embeds, mask = self.pipe.encode_prompt(prompts, device=self.device,
                                               max_sequence_length=self.max_sequence_length)
        lengths = mask.sum(1).tolist() if mask is not None else [embeds.shape[1]] * len(prompts)
        return [{"prompt_embeds": embeds[i, :int(n)]} for i, n in enumerate(lengths)]   # unpadded

    @staticmethod
    def _pad(items: list[torch.Tensor], length: int) -> tuple[torch.Tensor, torch.Tensor]:
        embeds = torch.stack([torch.cat([e, e.new_zeros(length - e.shape[0], e.shape[1])]) for e in items])
        mask = torch.stack([torch.arange(length, device=e.device) < e.shape[0] for e in items]).long()
        return embeds, mask

    def encode_prompts(self, prompts: list[str]) -> PromptEmbeds:
        """Embeddings padded to the longest prompt of the call (and the negative prompt), with the text mask."""
        items = [e["prompt_embeds"].to(self.device) for e in self._encode_cached(prompts, self._encode)]
        neg = self._negative(self.negative_prompt, self._encode)["prompt_embeds"] if self.do_cfg else None
        length = max([e.shape[0] for e in items] + ([neg.shape[0]] if neg is not None else []))
        embeds, mask = self._pad(items, length)
        shared = {}
        if neg is not None:
            neg_embeds, neg_mask = self._pad([neg], length)
            shared = {"neg_prompt_embeds": neg_embeds, "neg_prompt_mask": neg_mask}
        return PromptEmbeds({"prompt_embeds": embeds, "prompt_mask": mask}, shared)

    # -- latents ------------------------------------------------------------------------------------------------
    def velocity(self, latents: torch.Tensor, sigma: torch.Tensor, embeds: PromptEmbeds) -> torch.Tensor:
        self._check_ready()
        b = latents.shape[0]
        enc, mask = embeds.tensors["prompt_embeds"], embeds.tensors["prompt_mask"]
        x, t = latents, sigma.to(latents.dtype)                  # Qwen-Image timestep scale: sigma (x1000 inside)
        if self.do_cfg:                                          # one forward over [uncond, cond]
            enc = torch.cat([embeds.shared["neg_prompt_embeds"].expand(b, -1, -1), enc])
            mask = torch.cat([embeds.shared["neg_prompt_mask"].expand(b, -1), mask])
            x, t = torch.cat([x, x]), torch.cat([t, t])
        with self._autocast():
            out = self._active(hidden_states=x, timestep=t, encoder_hidden_states=enc,
                               encoder_hidden_states_mask=mask, img_shapes=[[(1, *self._grid)]] * x.shape[0],
                               return_dict=False)[0].float()
        if self.do_cfg:
            v_u, v_c = out.chunk(2)
            return self.cfg_combine(v_u, v_c, self.guidance_scale, renorm_dim=-1 if self.cfg_renorm else None)
        return out

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        lat = self.pipe._unpack_latents(latents, self.height, self.width, self.pipe.vae_scale_factor)
        lat = lat * self._lat_std.to(lat.device) + self._lat_mean.to(lat.device)
        image = self.vae.decode(lat.to(self.vae.dtype), return_dict=False)[0][:, :, 0]
        return (image.float() / 2 + 0.5).clamp(0, 1)

    def encode_images(self, images: torch.Tensor) -> torch.Tensor:
        """Images (B, 3, H, W) in [0, 1] -> packed latents (the VAE posterior mean), the inverse of :meth:`decode`."""
        x = images.to(self.device, self.vae.dtype)[:, :, None] * 2 - 1          # a 1-frame video
        lat = self.vae.encode(x).latent_dist.mean.float()
        lat = ((lat - self._lat_mean.to(lat.device)) / self._lat_std.to(lat.device))[:, :, 0]
        b, c, h, w = lat.shape
        return self.pipe._pack_latents(lat, b, c, h, w)

    def scheduler_config(self) -> dict:
        return {**dict(self.scheduler.config), **pipeline_sigma_keys(self._latent_shape[0], self.dynamic_shift)}
