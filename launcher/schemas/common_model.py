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
    offload_text_encoders: bool = True        # GPU: text encoders on the CPU except while encoding new prompts
    meta_init: bool = False           # FSDP: ranks > 0 build the transformer on meta, parallelize() broadcasts rank 0's
