"""Configs of reward=pickscore and reward=clip: a transformers CLIPModel scored as logit_scale x cosine / divide_by.
Offline: reward.path / reward.processor_path = local folders (see rewards/weights.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from rewardflow.dtypes import Dtype
from rewardflow.errors import ConfigErrors
from rewards.base_config import RewardConfig, check_compute_dtype
from rewards.weights import HF_PROCESSOR, HF_WEIGHTS, require_files


def check_clip_model(cfg: Any, errors: ConfigErrors) -> None:
    """The rules both transformers CLIPModel rewards share: the scale, the dtype, and the model and processor files
    (a local folder must hold them; a hub id must be in the local cache when offline: rewards/weights.py)."""
    r, key = cfg.reward, errors.key("reward")
    errors.require(r.divide_by > 0, "reward.divide_by", f"must be > 0 (got {r.divide_by})")
    check_compute_dtype(cfg, errors)
    with errors.collect():
        require_files(f"{key}.path", r.path, ["config.json", HF_WEIGHTS])
    with errors.collect():
        require_files(
            f"{key}.processor_path" if r.processor_path else f"{key}.path", r.processor_path or r.path, HF_PROCESSOR
        )


@dataclass
class PickScoreRewardConfig(RewardConfig):
    """PickScore_v1 (CLIP-H) with the LAION CLIP-H processor settings; score = logit_scale x cosine (raw, ~18-23)."""

    _target_: str = "rewards.hf_clip.PickScoreReward"
    name: str = "pickscore"
    path: str = "yuvalkirstain/PickScore_v1"  # CLIPModel: hub id or local folder
    processor_path: Optional[str] = "laion/CLIP-ViT-H-14-laion2B-s32B-b79K"  # tokenizer + preprocessor; null: path
    divide_by: float = 1.0  # 1: raw logit_scale x cosine (~18-23); 26: flow_grpo's ~0-1 scale
    dtype: Dtype = Dtype.auto

    @classmethod
    def check(cls, cfg: Any, errors: ConfigErrors) -> None:
        super().check(cfg, errors)
        check_clip_model(cfg, errors)


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

    @classmethod
    def check(cls, cfg: Any, errors: ConfigErrors) -> None:
        super().check(cfg, errors)
        check_clip_model(cfg, errors)


SCHEMAS = {"reward": {"pickscore": PickScoreRewardConfig, "clip": CLIPScoreRewardConfig}}
