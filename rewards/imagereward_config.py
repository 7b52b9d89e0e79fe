"""Config of reward=imagereward: ImageReward v1.0 (THUDM, arXiv:2304.05977), a BLIP ViT-L image encoder and a BERT
text encoder that cross-attends to it, with an MLP head, from ``THUDM/ImageReward`` ``ImageReward.pt`` and
``med_config.json``; the tokenizer is bert-base-uncased's. About -2..2 (standardised over its training set).
Offline: reward.path=/local/folder (ImageReward.pt + med_config.json) and reward.tokenizer_path=/local/bert-base-uncased."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rewardflow.dtypes import Dtype
from rewardflow.errors import ConfigErrors
from rewards.base_config import RewardConfig, check_compute_dtype
from rewards.weights import is_local, require_files

MED_CONFIG = "med_config.json"  # the text encoder's BertConfig, as the release ships it


@dataclass
class ImageRewardConfig(RewardConfig):
    _target_: str = "rewards.imagereward.ImageRewardReward"
    name: str = "imagereward"
    path: str = "THUDM/ImageReward"  # hub id, local folder holding `filename` and med_config.json, or the .pt file
    filename: str = "ImageReward.pt"
    tokenizer_path: str = "google-bert/bert-base-uncased"  # BLIP's tokenizer (+ its [DEC] and [ENC] tokens)
    dtype: Dtype = Dtype.auto  # auto: bf16 on GPU, fp32 on CPU; the head runs in fp32

    @classmethod
    def check(cls, cfg: Any, errors: ConfigErrors) -> None:
        super().check(cfg, errors)
        r, key = cfg.reward, errors.key("reward")
        check_compute_dtype(cfg, errors)
        with errors.collect():
            if is_local(r.path) and Path(r.path).expanduser().is_file():  # the .pt itself: its config beside it
                require_files(f"{key}.path", r.path, [r.filename], allow_file=True)
                require_files(f"{key}.path", str(Path(r.path).expanduser().parent), [MED_CONFIG])
            else:
                require_files(f"{key}.path", r.path, [r.filename, MED_CONFIG])
        with errors.collect():
            require_files(f"{key}.tokenizer_path", r.tokenizer_path, [("vocab.txt", "tokenizer.json")])


SCHEMAS = {"reward": {"imagereward": ImageRewardConfig}}
