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

import torch

from models.backbone import PromptEmbeds
from models.common import DiffusersBackbone
from models.sigma_grids import unipc_flow_sigmas
from models.wan_config import WanModelConfig
from rewardflow.errors import require

WAN_COMPONENTS = ("transformer", "vae", "text_encoder", "tokenizer", "scheduler")


def wan_model_timestep(sigma: torch.Tensor, integer: bool = True) -> torch.Tensor:
    """Wan's timestep for noise level ``sigma`` (float64): UniPC's ``int64(1000 sigma)`` capped at 999 (the 1e-4
    absorbs float32 rounding of grids that sit exactly on multiples of 1/1000, e.g. DanceGRPO's quantised times);
    ``integer=False``: ``1000 sigma``."""
    t = sigma.double() * 1000.0
    return torch.floor(t + 1e-4).clamp(0, 999) if integer else t


class WanBackbone(DiffusersBackbone):
    """Wan2.1 T2V backbone, built from its typed config (:class:`models.wan_config.WanModelConfig`): ``cfg.path``
    holds ``transformer/ vae/ text_encoder/ tokenizer/ scheduler/``; ``cfg.num_frames`` frames per video (``4k + 1``;
    1 = an image); CFG with ``cfg.guidance_scale`` and ``cfg.negative_prompt``; UMT5 embeddings zero-padded to
    ``cfg.max_sequence_length``; ``cfg.integer_timesteps`` feeds ``floor(1000 sigma)`` as UniPC's int64 timesteps.
    ``keep_reference`` as :class:`models.flux.FluxBackbone`.
    """

    name = "wan2.1"
    family = "Wan2.1"
    hub_id = "Wan-AI/Wan2.1-T2V-1.3B-Diffusers"
    components = WAN_COMPONENTS
    block_attrs = ("blocks",)
    video = True

    def __init__(self, cfg: WanModelConfig, keep_reference: bool = False):
        import diffusers
        from diffusers import AutoencoderKLWan, WanPipeline, WanTransformer3DModel
        from transformers import AutoTokenizer, UMT5EncoderModel

        self._init_common(cfg, WAN_COMPONENTS)
        self.num_frames, self.integer_timesteps = cfg.num_frames, cfg.integer_timesteps
        self.guidance_scale, self.negative_prompt = float(cfg.guidance_scale), cfg.negative_prompt
        self.transformer = self._load_transformer(WanTransformer3DModel)
        self.vae = self._load(AutoencoderKLWan, "vae", torch_dtype=torch.float32).requires_grad_(False).eval()
        sched_cls = getattr(
            diffusers,
            self.loader.load_config(diffusers.UniPCMultistepScheduler, "scheduler").get(
                "_class_name", "UniPCMultistepScheduler"
            ),
        )
        self.scheduler = self._load(sched_cls, "scheduler")
        self.pipe = WanPipeline(
            tokenizer=self._load(AutoTokenizer, "tokenizer"),
            text_encoder=self._load_frozen(UMT5EncoderModel, "text_encoder"),
            vae=self.vae,
            scheduler=self.scheduler,
            transformer=self.transformer,
        )
        sf, tf = self.pipe.vae_scale_factor_spatial, self.pipe.vae_scale_factor_temporal
        self._require_image_size(sf * self.transformer.config.patch_size[1])
        require(
            self.num_frames >= 1 and (self.num_frames - 1) % tf == 0,
            "model.num_frames",
            f"must be {tf}k + 1 for the VAE of model.path={self.path!r} (got {self.num_frames})",
        )
        self._init_training(keep_reference, [self.pipe.text_encoder], self.vae)
        self._latent_shape = (
            self.transformer.config.in_channels,
            (self.num_frames - 1) // tf + 1,
            self.height // sf,
            self.width // sf,
        )
        z = self.vae.config.z_dim
        self._lat_mean = torch.tensor(self.vae.config.latents_mean, dtype=torch.float32).view(1, z, 1, 1, 1)
        self._lat_std = torch.tensor(self.vae.config.latents_std, dtype=torch.float32).view(1, z, 1, 1, 1)

    # -- conditioning -------------------------------------------------------------------------------------------
    def _encode(self, prompts: list[str]) -> list[dict[str, torch.Tensor]]:
        from diffusers.pipelines.wan.pipeline_wan import prompt_clean

        embeds, _ = self.pipe.encode_prompt(
            prompts, do_classifier_free_guidance=False, device=self.device, max_sequence_length=self.max_sequence_length
        )
        lengths = self.pipe.tokenizer(
            [prompt_clean(p) for p in prompts],
            padding="max_length",
            max_length=self.max_sequence_length,
            truncation=True,
            return_attention_mask=True,
        ).attention_mask
        return [{"prompt_embeds": embeds[i, : sum(m)]} for i, m in enumerate(lengths)]  # zeros beyond: not stored

    def _pad(self, e: torch.Tensor) -> torch.Tensor:
        return torch.cat([e, e.new_zeros(self.max_sequence_length - e.shape[0], e.shape[1])])

    def encode_prompts(self, prompts: list[str]) -> PromptEmbeds:
        entries = self._encode_cached(prompts, self._encode)
        embeds = torch.stack([self._pad(e["prompt_embeds"].to(self.device)) for e in entries])
        shared = {}
        if self.do_cfg:
            shared = {
                "neg_prompt_embeds": self._pad(self._negative(self.negative_prompt, self._encode)["prompt_embeds"])[
                    None
                ]
            }
        return PromptEmbeds({"prompt_embeds": embeds}, shared)

    # -- latents ------------------------------------------------------------------------------------------------
    def model_timestep(self, sigma: torch.Tensor) -> torch.Tensor:
        return wan_model_timestep(sigma, self.integer_timesteps)

    def pipeline_kwargs(self) -> dict:
        return {**super().pipeline_kwargs(), "num_frames": self.num_frames}

    def velocity(self, latents: torch.Tensor, sigma: torch.Tensor, embeds: PromptEmbeds) -> torch.Tensor:
        self._check_ready()
        return self.guided_velocity(
            latents,
            self.model_timestep(sigma).to(latents.dtype),
            cond={"encoder_hidden_states": embeds.tensors["prompt_embeds"]},
            uncond={"encoder_hidden_states": embeds.shared.get("neg_prompt_embeds")},
        )

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """Frames ``(B, F, 3, H, W)`` in [0, 1]."""
        lat = latents * self._lat_std.to(latents.device) + self._lat_mean.to(latents.device)
        video = self.vae.decode(lat.to(self.vae.dtype), return_dict=False)[0]  # (B, 3, F, H, W)
        return (video.float() / 2 + 0.5).clamp(0, 1).permute(0, 2, 1, 3, 4)

    def encode_images(self, frames: torch.Tensor) -> torch.Tensor:
        """Frames (B, F, 3, H, W) in [0, 1] -> latents (the VAE posterior mean), the inverse of :meth:`decode`."""
        x = frames.to(self.device, self.vae.dtype).permute(0, 2, 1, 3, 4) * 2 - 1
        lat = self.vae.encode(x).latent_dist.mean.float()
        return (lat - self._lat_mean.to(lat.device)) / self._lat_std.to(lat.device)

    def sigmas(self, num_steps: int, shift: float) -> torch.Tensor:
        """UniPC's flow sigmas with ``flow_shift = shift`` (3 for 480p, 5 for 720p), stepped with Euler; a
        checkpoint with a flow-match Euler scheduler gets that scheduler's static-shift grid."""
        if type(self.scheduler).__name__ == "UniPCMultistepScheduler":
            return unipc_flow_sigmas(num_steps, shift, dict(self.scheduler.config))
        return super().sigmas(num_steps, shift)
