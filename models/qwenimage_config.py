"""Config of model=qwenimage: Qwen-Image (20B MMDiT + Qwen2.5-VL-7B text encoder). Model card: 1328x1328 (1:1), 50
steps, true_cfg_scale 4.0 with negative prompt " ". RL recipes: DanceGRPO / JAGG 720x720, 20-21 steps, no CFG
(guidance_scale 1), full fine-tuning; Flow-GRPO LoRA. The sigma grid is linspace(1, 1/N, N) with the scheduler's
resolution-dependent shift (dynamic_shift) and a terminal sigma 0.02. Timestep fed to the transformer: sigma (it
multiplies by 1000 itself)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional

from models.common_config import DiffusersModelConfig
from rewardflow.errors import ConfigErrors

MAX_TEXT_TOKENS = 1024  # QwenImagePipeline's limit on max_sequence_length


@dataclass
class QwenImageModelConfig(DiffusersModelConfig):
    preload_modules: ClassVar[tuple[str, ...]] = ("diffusers.pipelines.qwenimage.pipeline_qwenimage",)
    _target_: str = "models.qwenimage.QwenImageBackbone"
    name: str = "qwenimage"
    path: Optional[str] = "Qwen/Qwen-Image"
    height: int = 512  # model card: 1328; DanceGRPO / JAGG: 720
    width: int = 512
    guidance_scale: float = 4.0  # true CFG (the pipeline's true_cfg_scale 4.0); DanceGRPO / JAGG: 1 (off)
    negative_prompt: str = " "
    cfg_renorm: bool = True  # rescale the CFG velocity to the conditional norm per token (as the pipeline)
    max_sequence_length: int = 512  # text tokens after the chat template (the pipeline's default; <= 1024)
    dynamic_shift: bool = True  # method.schedule=scheduler: resolution-dependent shift as QwenImagePipeline
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
    # finetune: lora (DanceGRPO / JAGG: full)

    @classmethod
    def check(cls, cfg: Any, errors: ConfigErrors) -> None:
        super().check(cfg, errors)
        n = cfg.model.max_sequence_length
        errors.require(
            n <= MAX_TEXT_TOKENS,
            "model.max_sequence_length",
            f"must be in [1, {MAX_TEXT_TOKENS}] for Qwen-Image (got {n})",
        )


SCHEMAS = {"model": {"qwenimage": QwenImageModelConfig}}
