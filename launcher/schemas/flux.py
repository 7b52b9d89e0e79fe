"""Schemas of the FLUX.1 family (model=flux|tiny_flux)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


@dataclass
class FluxModelConfig:
    _target_: str = "models.flux.FluxBackbone"
    name: str = "flux"
    path: Optional[str] = "black-forest-labs/FLUX.1-dev"   # hub id or local folder
    height: int = 512
    width: int = 512
    guidance: float = 3.5             # FLUX.1-dev distilled guidance (embedded, no CFG)
    max_sequence_length: int = 512
    finetune: str = "lora"            # lora | full
    lora_rank: int = 32
    lora_alpha: float = 64.0
    lora_targets: list[str] = field(default_factory=lambda: ["to_q", "to_k", "to_v", "to_out.0"])
    gradient_checkpointing: bool = False
    device: str = "auto"              # auto: cuda if available, else cpu
    dtype: str = "auto"               # auto: bf16 on GPU, fp32 on CPU
    dynamic_shift: bool = True        # method.schedule=scheduler: resolution-dependent shift as FluxPipeline
    prompt_cache_size: Optional[int] = 4096   # prompts whose text embeddings are cached (LRU); null = unbounded
    text_encoders: str = "offload"    # offload | device | precompute (docs/memory.md#text-conditioning)
    reference_dtype: str = "bfloat16"  # full fine-tuning: dtype of the frozen reference copy (KL, EAM, AM)
    base_sharding: str = "shard"      # LoRA: shard | replicate the frozen base across ranks (docs/memory.md)


@dataclass
class TinyFluxModelConfig(FluxModelConfig):
    _target_: str = "models.tiny_flux.TinyFluxBackbone"
    name: str = "tiny_flux"
    path: Optional[str] = None        # null: build the tiny twin in cache_dir and load it through FluxBackbone
    seed: int = 0                     # seed of the twin's random weights
    cache_dir: Optional[str] = None   # default $REWARDFLOW_CACHE or ~/.cache/rewardflow


SCHEMAS = {"model": {"flux": FluxModelConfig, "tiny_flux": TinyFluxModelConfig}}
