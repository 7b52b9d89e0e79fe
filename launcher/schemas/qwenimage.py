"""Schemas of the Qwen-Image family (model=qwenimage|tiny_qwenimage)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from launcher.schemas.common_model import CommonModelFields


@dataclass
class QwenImageModelConfig(CommonModelFields):
    _target_: str = "models.qwenimage.QwenImageBackbone"
    name: str = "qwenimage"
    path: Optional[str] = "Qwen/Qwen-Image"   # hub id or local folder
    height: int = 512
    width: int = 512
    guidance_scale: float = 4.0       # true CFG scale (pipeline's true_cfg_scale); <= 1 disables it
    negative_prompt: str = " "
    cfg_renorm: bool = True           # rescale the CFG velocity to the conditional norm per token (as the pipeline)
    max_sequence_length: int = 512    # text tokens after the chat template (<= 1024)
    dynamic_shift: bool = True        # method.schedule=scheduler: resolution-dependent shift as QwenImagePipeline
    lora_rank: int = 32
    lora_alpha: float = 64.0
    lora_targets: list[str] = field(default_factory=lambda: ["to_q", "to_k", "to_v", "to_out.0", "add_q_proj",
                                                             "add_k_proj", "add_v_proj", "to_add_out"])


@dataclass
class TinyQwenImageModelConfig(QwenImageModelConfig):
    _target_: str = "models.tiny_qwenimage.TinyQwenImageBackbone"
    name: str = "tiny_qwenimage"
    path: Optional[str] = None        # null: build the tiny twin in cache_dir and load it through QwenImageBackbone
    seed: int = 0
    cache_dir: Optional[str] = None


SCHEMAS = {"model": {"qwenimage": QwenImageModelConfig, "tiny_qwenimage": TinyQwenImageModelConfig}}
