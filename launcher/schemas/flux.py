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
    activation_checkpointing: str = "none"   # none | full | every_k | auto (docs/performance.md)
    activation_checkpointing_k: int = 2       # every_k: one block of every k consecutive blocks is checkpointed
    compile: bool = False             # torch.compile each transformer block (docs/performance.md#compiled-blocks)
    device: str = "auto"              # auto: cuda if available, else cpu
    dtype: str = "auto"               # auto: bf16 on GPU, fp32 on CPU
    dynamic_shift: bool = True        # method.schedule=scheduler: resolution-dependent shift as FluxPipeline
    prompt_cache_size: Optional[int] = 4096   # prompts whose text embeddings are cached (LRU); null = unbounded
    offload_text_encoders: bool = True        # GPU: text encoders on the CPU except while encoding new prompts
    meta_init: bool = False           # FSDP: ranks > 0 build the transformer on meta, parallelize() broadcasts rank 0's


@dataclass
class TinyFluxModelConfig(FluxModelConfig):
    _target_: str = "models.tiny_flux.TinyFluxBackbone"
    name: str = "tiny_flux"
    path: Optional[str] = None        # null: build the tiny twin in cache_dir and load it through FluxBackbone
    seed: int = 0                     # seed of the twin's random weights
    cache_dir: Optional[str] = None   # default $REWARDFLOW_CACHE or ~/.cache/rewardflow


SCHEMAS = {"model": {"flux": FluxModelConfig, "tiny_flux": TinyFluxModelConfig}}
