"""Config of model=sd35m: Stable Diffusion 3.5 Medium with Flow-GRPO's SD3.5-M recipe: 512x512 (model card: 1024),
true CFG 4.5 with an empty negative prompt, LoRA r32/alpha64 on the joint-attention projections, 10 sampling steps
in training (40 at evaluation), static shift 3.0 from the scheduler config. Timestep fed to the MMDiT: 1000 sigma."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Optional

from models.common_config import DiffusersModelConfig


@dataclass
class SD3ModelConfig(DiffusersModelConfig):
    preload_modules: ClassVar[tuple[str, ...]] = ("diffusers.pipelines.stable_diffusion_3.pipeline_stable_diffusion_3",)
    _target_: str = "models.sd3.SD3Backbone"
    name: str = "sd35m"
    path: Optional[str] = "stabilityai/stable-diffusion-3.5-medium"
    guidance_scale: float = 4.5  # true CFG (one batch-2 forward): model card and Flow-GRPO 4.5 (pipeline default
    # 7.0); <= 1 turns CFG off
    negative_prompt: str = ""
    max_sequence_length: int = 256  # T5 tokens (the pipeline's default)
    lora_targets: list[str] = field(
        default_factory=lambda: [
            "to_q",
            "to_k",
            "to_v",
            "to_out.0",
            "add_q_proj",
            "add_k_proj",
            "add_v_proj",
            "to_add_out",
        ]
    )


SCHEMAS = {"model": {"sd35m": SD3ModelConfig}}
