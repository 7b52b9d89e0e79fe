"""Configs of reward=pickscore and reward=clip: a transformers CLIPModel scored as logit_scale x cosine / divide_by.
Offline: reward.path / reward.processor_path = local folders (see rewards/weights.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from rewardflow.dtypes import Dtype
from rewards.base_config import RewardConfig


@dataclass
class PickScoreRewardConfig(RewardConfig):
    """PickScore_v1 (CLIP-H) with the LAION CLIP-H processor settings; score = logit_scale x cosine (raw, ~18-23)."""

    _target_: str = "rewards.hf_clip.PickScoreReward"
    name: str = "pickscore"
    path: str = "yuvalkirstain/PickScore_v1"  # CLIPModel: hub id or local folder
    processor_path: Optional[str] = "laion/CLIP-ViT-H-14-laion2B-s32B-b79K"  # tokenizer + preprocessor; null: path
    divide_by: float = 1.0  # 1: raw logit_scale x cosine (~18-23); 26: flow_grpo's ~0-1 scale
    dtype: Dtype = Dtype.auto


@dataclass
class CLIPScoreRewardConfig(RewardConfig):
    """CLIPScore with openai/clip-vit-large-patch14: logits_per_image / 100 (= cosine), as flow_grpo and
    DiffusionNFT; divide_by=30 gives UniRL's scale."""

    _target_: str = "rewards.hf_clip.CLIPScoreReward"
    name: str = "clip"
    path: str = "openai/clip-vit-large-patch14"
    processor_path: Optional[str] = None  # null: the processor files in `path`
    divide_by: float = 100.0
    dtype: Dtype = Dtype.auto


SCHEMAS = {"reward": {"pickscore": PickScoreRewardConfig, "clip": CLIPScoreRewardConfig}}
