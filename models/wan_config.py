"""Config of model=wan2.1: Wan2.1 text-to-video 1.3B (model.path=Wan-AI/Wan2.1-T2V-14B-Diffusers or a local folder
for 14B) with Flash-GRPO's Wan2.1-1.3B recipe: 480x832, 81 frames, CFG 4.5 with an empty negative prompt, UniPC flow
sigmas with flow_shift 3.0 stepped with Euler, 20 sampling steps in training (50 at evaluation), LoRA r16/alpha32.
Pipeline defaults: guidance 5.0, 50 steps; flow_shift 3.0 for 480p, 5.0 for 720p. DanceGRPO's Wan-1.3B: 512x512 with
1 frame, CFG 5, 20 steps, full fine-tuning. Timestep fed to the transformer: floor(1000 sigma) (UniPC's int64
timesteps). decode() returns frames (B, F, 3, H, W); rewards score them per frame."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional

from models.common_config import DiffusersModelConfig
from rewardflow.errors import ConfigErrors


@dataclass
class WanModelConfig(DiffusersModelConfig):
    preload_modules: ClassVar[tuple[str, ...]] = ("diffusers.pipelines.wan.pipeline_wan",)
    #: model.num_frames must be ``vae_temporal_factor k + 1`` (the published VAE and the tiny twin's: 4)
    vae_temporal_factor: ClassVar[int] = 4

    _target_: str = "models.wan.WanBackbone"
    name: str = "wan2.1"
    path: Optional[str] = "Wan-AI/Wan2.1-T2V-1.3B-Diffusers"
    height: int = 480
    width: int = 832
    num_frames: int = 81  # 4k + 1; DanceGRPO: 1 (an image)
    fps: int = 16  # frames per second of the videos a run writes and logs (Wan2.1's; docs/wandb.md#samples-and-videos)
    guidance_scale: float = 4.5  # true CFG (one batch-2 forward); <= 1 turns it off. 4.5 is the Flash-GRPO
    # recipe these defaults follow; WanPipeline's own default is 5.0
    negative_prompt: str = ""
    max_sequence_length: int = 512  # UMT5 tokens (zero-padded to this length, as the pipeline)
    integer_timesteps: bool = True  # feed floor(1000 sigma) as UniPC's int64 timesteps
    lora_rank: int = 16  # >= 1
    lora_alpha: float = 32.0  # finite, > 0
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
    # finetune: lora (DanceGRPO: full)

    @classmethod
    def check(cls, cfg: Any, errors: ConfigErrors) -> None:
        super().check(cfg, errors)
        n, tf = cfg.model.num_frames, cls.vae_temporal_factor
        errors.require(
            n >= 1 and (n - 1) % tf == 0,
            "model.num_frames",
            f"must be {tf}k + 1 for this VAE (e.g. 1, {tf + 1}, 81; got {n})",
        )
        errors.require(cfg.model.fps >= 1, "model.fps", f"must be >= 1 (got {cfg.model.fps}). Fix: model.fps=16")


SCHEMAS = {"model": {"wan2.1": WanModelConfig}}
