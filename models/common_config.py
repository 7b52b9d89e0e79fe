"""The config fields every diffusers family shares (:class:`models.common.DiffusersBackbone`) and their rules on
values alone (run before torch is imported: docs/configuration.md#validation)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar, Optional

from omegaconf import MISSING

from models.backbone_config import ModelConfig
from rewardflow.devices import Device
from rewardflow.dtypes import Dtype
from rewardflow.errors import ConfigErrors


class ActivationCheckpointing(StrEnum):
    """Which transformer blocks keep only their inputs and run their forward again in the backward
    (docs/performance.md#activation-checkpointing)."""

    none = "none"  # every block keeps its activations: fastest, most memory
    full = "full"  # every block is checkpointed
    every_k = "every_k"  # one block of every model.activation_checkpointing_k consecutive blocks
    auto = "auto"  # the cheapest that fits, decided from the memory plan (launcher/plan/choices.py); full without one


class TextEncoders(StrEnum):
    offload = "offload"  # host memory, on the GPU only while encoding prompts not cached yet
    device = "device"  # always on the GPU
    precompute = "precompute"  # the prompt set encoded once at start into an on-disk cache, the encoders freed
    auto = "auto"  # device if the plan fits with them there, else offload (launcher/plan/choices.py); offload without
    # a plan


class BaseSharding(StrEnum):
    shard = "shard"  # the frozen LoRA base divided across ranks (FSDP2)
    replicate = "replicate"  # whole on every rank: no all-gather per forward


@dataclass
class DiffusersModelConfig(ModelConfig):
    #: model.height and model.width must be multiples of this: the family's VAE factor x its 2x2 patches (a tiny
    #: twin's config sets its own VAE's)
    image_size_multiple: ClassVar[int] = 16

    path: Optional[str] = MISSING  # hub id or a local folder laid out like the family's diffusers repository
    height: int = 512  # image size in pixels
    width: int = 512
    max_sequence_length: int = MISSING  # text tokens
    lora_rank: int = 32  # >= 1
    lora_alpha: float = 64.0  # finite, > 0: the LoRA update is scaled by lora_alpha / lora_rank
    lora_targets: list[str] = MISSING  # module names the LoRA adapter wraps
    activation_checkpointing: ActivationCheckpointing = ActivationCheckpointing.auto
    activation_checkpointing_k: int = 2  # every_k: one block of every k consecutive blocks is checkpointed
    compile: bool = False  # torch.compile every transformer block (docs/performance.md#compiled-blocks)
    device: Device = Device.auto  # auto: cuda if available, else cpu
    allow_cpu: bool = False  # a real family on the CPU takes hours per step: refused unless true
    dtype: Dtype = Dtype.auto  # compute dtype of the forward (the transformer keeps fp32 master weights)
    prompt_cache_size: Optional[int] = 4096  # prompts whose text embeddings are cached (LRU), >= 0 or null;
    # 0 = none (every batch's prompts are encoded again), null = unbounded
    prompt_cache_gib: Optional[float] = 2.0  # ... and at most this many GiB of them (host memory), >= 0 or null;
    # FLUX's T5 entry is 4 MiB, so 4096 prompts alone would hold 16 GiB per rank (docs/memory.md#text-conditioning)
    text_encoders: TextEncoders = TextEncoders.offload  # where the text encoders live (docs/memory.md)
    reference_dtype: Dtype = Dtype.bfloat16  # full fine-tuning: storage dtype of the frozen reference (KL, EAM, AM)
    base_sharding: BaseSharding = BaseSharding.shard  # LoRA: the frozen base across ranks (docs/memory.md)

    @classmethod
    def check(cls, cfg: Any, errors: ConfigErrors) -> None:
        super().check(cfg, errors)
        m = cfg.model
        k = cls.image_size_multiple
        for key in ("height", "width"):
            value = getattr(m, key)
            errors.require(
                value > 0 and value % k == 0,
                f"model.{key}",
                f"must be a positive multiple of {k} for "
                f"{m.name} (the VAE's factor x the 2x2 patches; got {value}). Fix: "
                f"model.{key}={max(k, round(value / k) * k)}",
            )
        errors.require(
            m.max_sequence_length >= 1, "model.max_sequence_length", f"must be >= 1 (got {m.max_sequence_length})"
        )
        errors.require(
            m.dtype not in (Dtype.float64, Dtype.fp64),
            "model.dtype",
            f"{m.dtype} is not a compute dtype of the diffusers families. Fix: model.dtype=auto (bf16 on a "
            f"GPU, fp32 on the CPU)",
        )
        errors.require(
            m.prompt_cache_size is None or m.prompt_cache_size >= 0,
            "model.prompt_cache_size",
            f"must be >= 0 or null (got {m.prompt_cache_size}): the prompts whose text embeddings stay cached; "
            f"0 = none (every batch's prompts are encoded again), null = every prompt. Fix: "
            f"model.prompt_cache_size=4096",
        )
        errors.require(
            m.prompt_cache_gib is None or (math.isfinite(m.prompt_cache_gib) and m.prompt_cache_gib >= 0),
            "model.prompt_cache_gib",
            f"must be a finite number >= 0 or null (got {m.prompt_cache_gib}): the host memory the cached text "
            f"embeddings may take, per rank; 0 = none, null = no byte bound. Fix: model.prompt_cache_gib=2",
        )
