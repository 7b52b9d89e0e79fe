"""Schemas of the Stable Diffusion 3.5 family (model=sd35m|tiny_sd35m)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from launcher.schemas.common_model import CommonModelFields


@dataclass
class SD3ModelConfig(CommonModelFields):
    _target_: str = "models.sd3.SD3Backbone"
    name: str = "sd35m"
    path: Optional[str] = "stabilityai/stable-diffusion-3.5-medium"   # hub id or local folder
    height: int = 512
    width: int = 512
    guidance_scale: float = 4.5       # true CFG (one batch-2 forward); <= 1 disables it
    negative_prompt: str = ""
    max_sequence_length: int = 256    # T5 tokens
    lora_rank: int = 32
    lora_alpha: float = 64.0
    lora_targets: list[str] = field(default_factory=lambda: ["to_q", "to_k", "to_v", "to_out.0", "add_q_proj",
                                                             "add_k_proj", "add_v_proj", "to_add_out"])


@dataclass
class TinySD3ModelConfig(SD3ModelConfig):
    _target_: str = "models.tiny_sd3.TinySD3Backbone"
    name: str = "tiny_sd35m"
    path: Optional[str] = None        # null: build the tiny twin in cache_dir and load it through SD3Backbone
    seed: int = 0
    cache_dir: Optional[str] = None   # default $REWARDFLOW_CACHE or ~/.cache/rewardflow


SCHEMAS = {"model": {"sd35m": SD3ModelConfig, "tiny_sd35m": TinySD3ModelConfig}}
