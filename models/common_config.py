"""The config fields every diffusers family shares (:class:`models.common.DiffusersBackbone`)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Optional

from omegaconf import MISSING

from models.backbone_config import ModelConfig
from rewardflow.devices import Device
from rewardflow.dtypes import Dtype


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
