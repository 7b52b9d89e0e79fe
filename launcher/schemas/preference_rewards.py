"""Schemas of the preference rewards (reward=hps|pickscore|clip) and their weighted sum (reward=multi).

``path`` keys take a hub id, a local folder or (HPSv2.1) a checkpoint file; see rewards/weights.py.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Optional

from launcher.schemas.builtin_rewards import RewardConfig


@dataclass
class HPSRewardConfig(RewardConfig):
    _target_: str = "rewards.hps.HPSv21Reward"
    name: str = "hps"
    path: str = "xswu/HPSv2"                  # hub id, local folder holding `filename`, or the .pt/.safetensors file
    filename: str = "HPS_v2.1_compressed.pt"  # HPS_v2_compressed.pt is v2.0 (the hpsv2 package's default)
    arch: str = "ViT-H-14"                    # open_clip architecture, or an open_clip model-config .json
    dtype: str = "auto"                       # auto: bf16 on GPU, fp32 on CPU


@dataclass
class PickScoreRewardConfig(RewardConfig):
    _target_: str = "rewards.hf_clip.PickScoreReward"
    name: str = "pickscore"
    path: str = "yuvalkirstain/PickScore_v1"                                # CLIPModel: hub id or local folder
    processor_path: Optional[str] = "laion/CLIP-ViT-H-14-laion2B-s32B-b79K"  # tokenizer + preprocessor; null: path
    divide_by: float = 1.0                    # 1: raw logit_scale x cosine (~18-23); 26: flow_grpo's ~0-1 scale
    dtype: str = "auto"


@dataclass
class CLIPScoreRewardConfig(RewardConfig):
    _target_: str = "rewards.hf_clip.CLIPScoreReward"
    name: str = "clip"
    path: str = "openai/clip-vit-large-patch14"
    processor_path: Optional[str] = None      # null: the processor files in `path`
    divide_by: float = 100.0                  # 100: flow_grpo / DiffusionNFT (= cosine); 30: UniRL
    dtype: str = "auto"


@dataclass
class MultiRewardConfig(RewardConfig):
    _target_: str = "rewards.multi.MultiReward"
    name: str = "multi"
    components: Dict[str, Any] = field(default_factory=dict)   # name -> a reward config (composed from options)
    weights: Dict[str, float] = field(default_factory=dict)    # name -> weight; 0 = scored and logged only
    normalize: str = "none"                   # per component before weighting: none | batch | running
    norm_momentum: float = 0.05               # EMA rate of normalize=running statistics


SCHEMAS = {"reward": {"hps": HPSRewardConfig, "pickscore": PickScoreRewardConfig, "clip": CLIPScoreRewardConfig,
                      "multi": MultiRewardConfig}}
