"""Config of reward=hps: HPSv2.1, open_clip ViT-H-14 + xswu/HPSv2 HPS_v2.1_compressed.pt; the score is the
image-prompt cosine (~0.25-0.33). Offline: reward.path=/local/folder (holding the checkpoint) or the .pt /
.safetensors file itself (see rewards/weights.py)."""

from __future__ import annotations

from dataclasses import dataclass

from rewardflow.dtypes import Dtype
from rewards.base_config import RewardConfig


@dataclass
class HPSRewardConfig(RewardConfig):
    _target_: str = "rewards.hps.HPSv21Reward"
    name: str = "hps"
    path: str = "xswu/HPSv2"  # hub id, local folder holding `filename`, or the .pt/.safetensors file
    filename: str = "HPS_v2.1_compressed.pt"  # HPS_v2_compressed.pt is v2.0 (the hpsv2 package's default)
    arch: str = "ViT-H-14"  # open_clip architecture, or an open_clip model-config .json
    dtype: Dtype = Dtype.auto  # auto: bf16 on GPU, fp32 on CPU


SCHEMAS = {"reward": {"hps": HPSRewardConfig}}
