"""FLUX.1 family adapter (``FluxTransformer2DModel`` + CLIP-L + T5 + ``AutoencoderKL``), loaded with diffusers'
``from_pretrained`` from a hub id or a local folder laid out like ``black-forest-labs/FLUX.1-dev``.

Conventions pinned by tests: the transformer takes sigma in [0, 1] and multiplies by 1000 itself; latents are
2x2-packed tokens; FLUX.1-dev is guidance-distilled, so guidance goes through the ``guidance`` embedding (no CFG).
"""
from __future__ import annotations

import contextlib
import copy
import logging
from typing import Iterator, Sequence

import torch

from models.backbone import Backbone, PromptEmbeds

log = logging.getLogger(__name__)

FLUX_LORA_TARGETS = ("to_q", "to_k", "to_v", "to_out.0")
FINETUNE_MODES = ("full", "lora")


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """Compute dtype: bf16 on GPU, fp32 on CPU (bf16 is emulated and 1.5-6x slower there, cpu_stack.md §2)."""
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
            "float16": torch.float16, "fp16": torch.float16}[dtype]


class FluxBackbone(Backbone):
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
        device, dtype: ``auto`` = CUDA + bf16 when available, else CPU + fp32.
    """

    name = "flux"

    def __init__(self, path: str, height: int = 512, width: int = 512, guidance: float = 3.5,
                 max_sequence_length: int = 512, finetune: str = "lora", lora_rank: int = 32,
                 lora_alpha: float = 64.0, lora_targets: Sequence[str] = FLUX_LORA_TARGETS,
                 gradient_checkpointing: bool = False, keep_reference: bool = False, device: str = "auto",
                 dtype: str = "auto", name: str | None = None):
        from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel
        from transformers import CLIPTextModel, CLIPTokenizer, T5EncoderModel, T5TokenizerFast

        self.name = name or self.name
        self.device = resolve_device(device)
        self.dtype = resolve_dtype(dtype, self.device)
        self.height, self.width, self.guidance = height, width, guidance
        self.max_sequence_length = max_sequence_length
        frozen = dict(torch_dtype=self.dtype)
        self.transformer = FluxTransformer2DModel.from_pretrained(path, subfolder="transformer",
                                                                  torch_dtype=torch.float32)
        self.vae = AutoencoderKL.from_pretrained(path, subfolder="vae", **frozen)
        self.scheduler = FlowMatchEulerDiscreteScheduler.from_pretrained(path, subfolder="scheduler")
        # The pipeline object is only a holder for diffusers' own prompt-encoding and packing code.
        self.pipe = FluxPipeline(
            scheduler=self.scheduler, vae=self.vae, transformer=self.transformer,
            text_encoder=CLIPTextModel.from_pretrained(path, subfolder="text_encoder", **frozen),
            text_encoder_2=T5EncoderModel.from_pretrained(path, subfolder="text_encoder_2", **frozen),
            tokenizer=CLIPTokenizer.from_pretrained(path, subfolder="tokenizer"),
            tokenizer_2=T5TokenizerFast.from_pretrained(path, subfolder="tokenizer_2"))
        for m in (self.vae, self.pipe.text_encoder, self.pipe.text_encoder_2):
            m.requires_grad_(False).eval().to(self.device)
        self._configure_finetune(finetune, lora_rank, lora_alpha, lora_targets, keep_reference)
        if gradient_checkpointing:
            self.transformer.enable_gradient_checkpointing()
        self.transformer.to(self.device).train()
        self._cache: dict[str, dict[str, torch.Tensor]] = {}
        sf = self.pipe.vae_scale_factor
        if height % (2 * sf) or width % (2 * sf):
            raise ValueError(f"model.height/width must be multiples of {2 * sf} for this VAE "
                             f"(got {height}x{width})")
        self._lat_h, self._lat_w = 2 * (height // (sf * 2)), 2 * (width // (sf * 2))
        c = self.transformer.config.in_channels
        self._latent_shape = ((self._lat_h // 2) * (self._lat_w // 2), c)
        self._img_ids = FluxPipeline._prepare_latent_image_ids(1, self._lat_h // 2, self._lat_w // 2,
                                                               self.device, self.dtype)

    # -- fine-tuning mode ---------------------------------------------------------------------------------------
    def _configure_finetune(self, finetune, rank, alpha, targets, keep_reference) -> None:
        if finetune not in FINETUNE_MODES:
            raise ValueError(f"model.finetune must be one of {FINETUNE_MODES}, got {finetune!r}")
        self.finetune = finetune
        self._reference_model = None
        if finetune == "lora":
            from peft import LoraConfig

            self.transformer.requires_grad_(False)
            self.transformer.add_adapter(LoraConfig(r=rank, lora_alpha=alpha, init_lora_weights="gaussian",
                                                    target_modules=list(targets)))
        else:
            self.transformer.requires_grad_(True)
            if keep_reference:
                self._reference_model = copy.deepcopy(self.transformer).requires_grad_(False).eval()
                self._reference_model.to(self.device)
        self._active = self.transformer

    def transformer_modules(self) -> list:
        return [self.transformer] + ([self._reference_model] if self._reference_model is not None else [])

    @contextlib.contextmanager
    def reference(self) -> Iterator[None]:
        if self.finetune == "lora":
            self.transformer.disable_adapters()
            try:
                yield
            finally:
                self.transformer.enable_adapters()
        else:
            if self._reference_model is None:
                raise RuntimeError("no reference policy was kept: build the backbone with keep_reference=True")
            self._active = self._reference_model
            try:
                yield
            finally:
                self._active = self.transformer

    # -- conditioning -------------------------------------------------------------------------------------------
    @torch.no_grad()
    def encode_prompts(self, prompts: list[str]) -> PromptEmbeds:
        missing = [p for p in dict.fromkeys(prompts) if p not in self._cache]
        if missing:
            embeds, pooled, _ = self.pipe.encode_prompt(missing, prompt_2=None, device=self.device,
                                                        max_sequence_length=self.max_sequence_length)
            for i, p in enumerate(missing):
                self._cache[p] = {"prompt_embeds": embeds[i], "pooled": pooled[i]}
        tensors = {k: torch.stack([self._cache[p][k] for p in prompts]) for k in ("prompt_embeds", "pooled")}
        text_len = tensors["prompt_embeds"].shape[1]
        txt_ids = torch.zeros(text_len, 3, device=self.device, dtype=self.dtype)
        return PromptEmbeds(tensors, {"txt_ids": txt_ids})

    # -- latents ------------------------------------------------------------------------------------------------
    @property
    def latent_shape(self) -> tuple[int, ...]:
        return self._latent_shape

    def velocity(self, latents: torch.Tensor, sigma: torch.Tensor, embeds: PromptEmbeds) -> torch.Tensor:
        b = latents.shape[0]
        model = self._active
        guidance = None
        if model.config.guidance_embeds:
            guidance = torch.full((b,), self.guidance, device=self.device, dtype=torch.float32)
        with torch.autocast(self.device.type, dtype=self.dtype, enabled=self.dtype != torch.float32):
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

    def parallelize(self, mesh) -> None:
        from models.parallelize import parallelize_flux

        parallelize_flux(self.transformer, mesh)
        if self._reference_model is not None:       # the frozen copy is sharded the same way (memory)
            parallelize_flux(self._reference_model, mesh)

    def scheduler_config(self) -> dict:
        return dict(self.scheduler.config)
