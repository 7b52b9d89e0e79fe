"""Fields every diffusers model family shares (imported by the per-family schema modules; defines no SCHEMAS)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass
class CommonModelFields:
    finetune: str = "lora"            # lora | full
    activation_checkpointing: str = "none"   # none | full | every_k | auto (docs/performance.md)
    activation_checkpointing_k: int = 2       # every_k: one block of every k consecutive blocks is checkpointed
    compile: bool = False             # torch.compile each transformer block (docs/performance.md#compiled-blocks)
    device: str = "auto"              # auto: cuda if available, else cpu
    dtype: str = "auto"               # auto: bf16 on GPU, fp32 on CPU
    prompt_cache_size: Optional[int] = 4096   # prompts whose text embeddings are cached (LRU); null = unbounded
    offload_text_encoders: bool = True        # GPU: text encoders on the CPU except while encoding new prompts
    meta_init: bool = False           # FSDP: ranks > 0 build the transformer on meta, parallelize() broadcasts rank 0's
