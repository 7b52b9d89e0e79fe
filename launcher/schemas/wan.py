"""Schemas of the Wan2.1 text-to-video family (model=wan2.1|tiny_wan2.1)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from launcher.schemas.common_model import CommonModelFields


@dataclass
class WanModelConfig(CommonModelFields):
    _target_: str = "models.wan.WanBackbone"
    name: str = "wan2.1"
    path: Optional[str] = "Wan-AI/Wan2.1-T2V-1.3B-Diffusers"   # or Wan-AI/Wan2.1-T2V-14B-Diffusers, or a folder
    height: int = 480
    width: int = 832
    num_frames: int = 81              # 4k + 1
    guidance_scale: float = 4.5       # true CFG (one batch-2 forward); <= 1 disables it
    negative_prompt: str = ""
    max_sequence_length: int = 512    # UMT5 tokens (zero-padded)
    integer_timesteps: bool = True    # feed floor(1000 sigma) as UniPC's int64 timesteps
    lora_rank: int = 16
    lora_alpha: float = 32.0
    lora_targets: list[str] = field(default_factory=lambda: ["to_q", "to_k", "to_v", "to_out.0", "add_q_proj",
                                                             "add_k_proj", "add_v_proj", "to_add_out"])


@dataclass
class TinyWanModelConfig(WanModelConfig):
    _target_: str = "models.tiny_wan.TinyWanBackbone"
    name: str = "tiny_wan2.1"
    path: Optional[str] = None        # null: build the tiny twin in cache_dir and load it through WanBackbone
    seed: int = 0
    cache_dir: Optional[str] = None


SCHEMAS = {"model": {"wan2.1": WanModelConfig, "tiny_wan2.1": TinyWanModelConfig}}
