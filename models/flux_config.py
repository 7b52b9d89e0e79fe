"""Config of model=flux: FLUX.1-dev with the real defaults of the DanceGRPO / Flow-GRPO Flux recipes: 720x720
(DanceGRPO) / 512x512, embedded guidance 3.5, T5 512 tokens, LoRA r32/alpha64 on the attention projections
(DanceGRPO's LoRA script: r128/alpha256)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Optional

from models.common_config import DiffusersModelConfig


@dataclass
class FluxModelConfig(DiffusersModelConfig):
    preload_modules: ClassVar[tuple[str, ...]] = ("diffusers.pipelines.flux.pipeline_flux",)
    _target_: str = "models.flux.FluxBackbone"
    name: str = "flux"
    path: Optional[str] = "black-forest-labs/FLUX.1-dev"
    guidance: float = 3.5  # FLUX.1-dev distilled guidance (embedded, no CFG)
    max_sequence_length: int = 512
    dynamic_shift: bool = True  # method.schedule=scheduler: resolution-dependent shift as FluxPipeline
    lora_targets: list[str] = field(default_factory=lambda: ["to_q", "to_k", "to_v", "to_out.0"])


SCHEMAS = {"model": {"flux": FluxModelConfig}}
