"""Config of reward=diversity: per prompt, the mean pairwise distance between the image embeddings of its samples
(CLIP ViT-L/14 by default; ``reward.embedding=pixels``: downsampled pixels, a download-free stand-in), an evaluation
metric only: ``+reward@eval.rewards.diversity=diversity`` logs ``eval/diversity/mean|std`` over the held-out prompts
(docs/rewards.md#diversity)."""

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


class Embedding(StrEnum):
    """What a sample is embedded as before the distances."""

    clip = "clip"  # CLIP's image embedding (reward.path): semantic, the papers' choice
    pixels = "pixels"  # its pixels area-averaged to pixel_size x pixel_size, mapped to [-1, 1]: no weights, no
    # download (the CPU demo's default, conf/eval_rewards/offline.yaml); a cheap stand-in that sees colour and layout


@dataclass
class DiversityRewardConfig(RewardConfig):
    _target_: str = "rewards.diversity.DiversityReward"
    name: str = "diversity"
    embedding: Embedding = Embedding.clip
    path: str = "openai/clip-vit-large-patch14"  # the CLIPModel whose image embeddings are compared (embedding=clip)
    processor_path: Optional[str] = None  # the image processor settings; null: those in `path`
    distance: Distance = Distance.cosine
    pixel_size: int = 16  # embedding=pixels: the side the images are area-averaged to (3 x 16 x 16 values)
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
            "+reward@eval.rewards.diversity=diversity (data=demo scores it already, on pixels)",
        ):
            return
        errors.require(
            cfg.eval.samples_per_prompt >= 2,
            "reward",
            f"diversity compares a prompt's samples, and eval.samples_per_prompt={cfg.eval.samples_per_prompt}. "
            f"Fix: eval.samples_per_prompt=4 (for example), or score no diversity: ~reward@eval.rewards.<its name>",
        )
        r = cfg.reward
        if r.embedding == Embedding.pixels:
            errors.require(r.pixel_size >= 1, "reward.pixel_size", f"must be >= 1 (got {r.pixel_size})")
            return
        check_clip_image_model(cfg, errors)


SCHEMAS = {"reward": {"diversity": DiversityRewardConfig}}
