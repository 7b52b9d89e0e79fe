"""Config of reward=diversity: per prompt, the mean pairwise distance between the image embeddings of its samples
(CLIP ViT-L/14 by default), an evaluation metric only: ``+reward@eval.rewards.diversity=diversity`` logs
``eval/diversity/mean|std`` over the held-out prompts (docs/rewards.md#diversity)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Optional

from rewardflow.dtypes import Dtype
from rewardflow.errors import ConfigErrors
from rewards.aesthetic_config import check_clip_image_model
from rewards.base_config import RewardConfig


class Distance(StrEnum):
    """The distance between two L2-normalised embeddings."""

    cosine = "cosine"  # 1 - cosine similarity, in [0, 2]
    euclidean = "euclidean"  # ||a - b||, in [0, 2] for unit vectors


@dataclass
class DiversityRewardConfig(RewardConfig):
    _target_: str = "rewards.diversity.DiversityReward"
    name: str = "diversity"
    path: str = "openai/clip-vit-large-patch14"  # the CLIPModel whose image embeddings are compared
    processor_path: Optional[str] = None  # the image processor settings; null: those in `path`
    distance: Distance = Distance.cosine
    dtype: Dtype = Dtype.auto  # of the CLIP encoder: auto = bf16 on GPU, fp32 on CPU; distances in float64

    @classmethod
    def check(cls, cfg: Any, errors: ConfigErrors) -> None:
        """Scored only in the held-out evaluation (``eval.rewards``), where each prompt has
        ``eval.samples_per_prompt`` >= 2 samples: a training step's rewards are per image."""
        super().check(cfg, errors)
        evaluated = any(r is cfg.reward for r in (cfg.eval.rewards or {}).values())  # Evaluator.check's as-trained cfg
        if not errors.require(
            evaluated,
            "reward",
            "diversity scores a prompt's samples together, not one image, so it cannot be trained on (nor be a "
            "component of reward=multi). Fix: train on another reward and evaluate diversity: "
            "+reward@eval.rewards.diversity=diversity",
        ):
            return
        errors.require(
            cfg.eval.samples_per_prompt >= 2,
            "reward",
            f"diversity compares a prompt's samples, and eval.samples_per_prompt={cfg.eval.samples_per_prompt}. "
            f"Fix: eval.samples_per_prompt=4 (for example)",
        )
        check_clip_image_model(cfg, errors)


SCHEMAS = {"reward": {"diversity": DiversityRewardConfig}}
