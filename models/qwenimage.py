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

import torch

from models.backbone import PromptEmbeds
from models.common import DiffusersBackbone
from models.qwenimage_config import QwenImageModelConfig
from models.sigma_grids import custom_sigmas
from rewardflow.errors import ConfigError

QWEN_COMPONENTS = ("transformer", "vae", "text_encoder", "tokenizer", "scheduler")


class QwenImageBackbone(DiffusersBackbone):
    """Qwen-Image backbone, built from its typed config (:class:`models.qwenimage_config.QwenImageModelConfig`):
    ``cfg.path`` holds ``transformer/ vae/ text_encoder/ tokenizer/ scheduler/``; true CFG with
    ``cfg.guidance_scale`` (the pipeline's ``true_cfg_scale``) and ``cfg.negative_prompt``, rescaled per token to the
    conditional velocity's norm when ``cfg.cfg_renorm`` (as QwenImagePipeline). ``keep_reference`` as
    :class:`models.flux.FluxBackbone`.

    The last block's text-stream output is discarded, so its ``to_add_out`` / ``txt_mlp`` weights never get a
    gradient; FSDP2 handles that (DDP would need ``find_unused_parameters``).
    """

    name = "qwenimage"
    family = "Qwen-Image"
    hub_id = "Qwen/Qwen-Image"
    components = QWEN_COMPONENTS
    block_attrs = ("transformer_blocks",)

    def __init__(self, cfg: QwenImageModelConfig, keep_reference: bool = False):
        from diffusers import (
            AutoencoderKLQwenImage,
            FlowMatchEulerDiscreteScheduler,
            QwenImagePipeline,
            QwenImageTransformer2DModel,
        )
        from transformers import Qwen2_5_VLForConditionalGeneration, Qwen2Tokenizer

        self._init_common(cfg, QWEN_COMPONENTS)
        self.guidance_scale, self.negative_prompt = float(cfg.guidance_scale), cfg.negative_prompt
        self.cfg_renorm, self.dynamic_shift = cfg.cfg_renorm, cfg.dynamic_shift
        self.transformer = self._load_transformer(QwenImageTransformer2DModel)
        if self.transformer.config.guidance_embeds:
            raise ConfigError(
                f"model.path={self.path!r}: guidance-distilled Qwen-Image transformers "
                f"(guidance_embeds=True) are not supported; use the base Qwen-Image checkpoint"
            )
        self.vae = self._load_frozen(AutoencoderKLQwenImage, "vae")
        self.scheduler = self._load(FlowMatchEulerDiscreteScheduler, "scheduler")
        self.pipe = QwenImagePipeline(
            transformer=self.transformer,
            scheduler=self.scheduler,
            vae=self.vae,
            text_encoder=self._load_frozen(Qwen2_5_VLForConditionalGeneration, "text_encoder"),
            tokenizer=self._load(Qwen2Tokenizer, "tokenizer"),
        )
        sf = self.pipe.vae_scale_factor
        self._require_image_size(2 * sf)
        self._init_training(keep_reference, [self.pipe.text_encoder], self.vae)
        self._grid = (self.height // sf // 2, self.width // sf // 2)
        self._latent_shape = (self._grid[0] * self._grid[1], self.transformer.config.in_channels)
        z = self.vae.config.z_dim
        self._lat_mean = torch.tensor(self.vae.config.latents_mean, dtype=torch.float32).view(1, z, 1, 1, 1)
        self._lat_std = torch.tensor(self.vae.config.latents_std, dtype=torch.float32).view(1, z, 1, 1, 1)

    # -- conditioning -------------------------------------------------------------------------------------------
    def _encode(self, prompts: list[str]) -> list[dict[str, torch.Tensor]]:
        embeds, mask = self.pipe.encode_prompt(
            prompts, device=self.device, max_sequence_length=self.max_sequence_length
        )
        lengths = mask.sum(1).tolist() if mask is not None else [embeds.shape[1]] * len(prompts)
        return [{"prompt_embeds": embeds[i, : int(n)]} for i, n in enumerate(lengths)]  # unpadded

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
        shared = embeds.shared
        rows = latents.shape[0] * (2 if self.do_cfg else 1)
        return self.guided_velocity(
            latents,
            self.model_timestep(sigma.to(latents.dtype)),
            cond={
                "encoder_hidden_states": embeds.tensors["prompt_embeds"],
                "encoder_hidden_states_mask": embeds.tensors["prompt_mask"],
            },
            uncond={
                "encoder_hidden_states": shared.get("neg_prompt_embeds"),
                "encoder_hidden_states_mask": shared.get("neg_prompt_mask"),
            },
            renorm_dim=-1 if self.cfg_renorm else None,
            img_shapes=[[(1, *self._grid)]] * rows,
        )

    def model_timestep(self, sigma: torch.Tensor) -> torch.Tensor:
        return sigma  # the transformer multiplies by 1000 itself (Timesteps(scale=1000))

    def pipeline_kwargs(self) -> dict:
        return dict(
            height=self.height,
            width=self.width,
            max_sequence_length=self.max_sequence_length,
            true_cfg_scale=self.guidance_scale,
            negative_prompt=self.negative_prompt,
        )

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        lat = self.pipe._unpack_latents(latents, self.height, self.width, self.pipe.vae_scale_factor)
        lat = lat * self._lat_std.to(lat.device) + self._lat_mean.to(lat.device)
        image = self.vae.decode(lat.to(self.vae.dtype), return_dict=False)[0][:, :, 0]
        return (image.float() / 2 + 0.5).clamp(0, 1)

    def encode_images(self, images: torch.Tensor) -> torch.Tensor:
        """Images (B, 3, H, W) in [0, 1] -> packed latents (the VAE posterior mean), the inverse of :meth:`decode`."""
        x = images.to(self.device, self.vae.dtype)[:, :, None] * 2 - 1  # a 1-frame video
        lat = self.vae.encode(x).latent_dist.mean.float()
        lat = ((lat - self._lat_mean.to(lat.device)) / self._lat_std.to(lat.device))[:, :, 0]
        b, c, h, w = lat.shape
        return self.pipe._pack_latents(lat, b, c, h, w)

    def sigmas(self, num_steps: int, shift: float) -> torch.Tensor:
        """QwenImagePipeline's grid: ``linspace(1, 1/N, N)`` with the resolution-dependent shift (``dynamic_shift``)
        and the scheduler's terminal sigma."""
        return custom_sigmas(num_steps, shift, dict(self.scheduler.config), self._latent_shape[0], self.dynamic_shift)
