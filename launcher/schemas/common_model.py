"""Fields every diffusers model family shares (imported by the per-family schema modules; defines no SCHEMAS)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass
class CommonModelFields:
    finetune: str = "lora"            # lora | full
    gradient_checkpointing: bool = False
    device: str = "auto"              # auto: cuda if available, else cpu
    dtype: str = "auto"               # auto: bf16 on GPU, fp32 on CPU
    prompt_cache_size: Optional[int] = 4096   # prompts whose text embeddings are cached (LRU); null = unbounded
    text_encoders: str = "offload"    # offload | device | precompute (docs/memory.md#text-conditioning)
    reference_dtype: str = "bfloat16"  # full fine-tuning: dtype of the frozen reference copy (KL, EAM, AM)
    base_sharding: str = "shard"      # LoRA: shard | replicate the frozen base across ranks (docs/memory.md)
