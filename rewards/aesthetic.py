"""reward=aesthetic: the LAION improved aesthetic predictor (github.com/christophschuhmann/improved-aesthetic-predictor,
``sac+logos+ava1-l14-linearMSE.pth``), the aesthetic score DDPO, flow_grpo and DiffusionNFT report.

score = head(normalise(CLIP ViT-L/14 image embedding)), about 1-10 (LAION-Aesthetics' "6+" subset is images scoring
above 6). The embedding is transformers' ``CLIPModel.get_image_features`` of ``openai/clip-vit-large-patch14``
(the OpenAI ViT-L/14 converted), as flow_grpo's and DDPO's scorers compute it; the head is
:class:`rewards.mlp_head.MLPHead` (keys ``layers.{0,2,4,6,7}.*``). Preprocessing is the CLIP processor's geometry as
tensor operations, so the score is differentiable in the image (the head is linear; DDPO and Adjoint Matching
fine-tune on its gradient).
"""

from __future__ import annotations

import torch

from rewardflow.errors import require
from rewards.aesthetic_config import AestheticRewardConfig
from rewards.base import Reward
from rewards.clip_image import CLIPImageEncoder
from rewards.mlp_head import MLPHead, head_keys
from rewards.weights import fetch_file, load_tensors


def head_state(key: str, state: dict) -> dict:
    """The head's entries of a state dict saved from ``nn.Sequential`` (``0.weight``) or from a module holding it
    as ``layers`` (``layers.0.weight``, the released file)."""
    if all(k in state for k in head_keys()):
        return state
    if all(k in state for k in head_keys("")):
        return {f"layers.{k}": v for k, v in state.items()}
    require(
        False,
        key,
        f"the file holds no aesthetic head: it lacks {', '.join(k for k in head_keys() if k not in state)} (it has "
        f"{', '.join(sorted(state)[:6])}...). Fix: point {key} at sac+logos+ava1-l14-linearMSE.pth",
    )
    return state


class AestheticReward(Reward[AestheticRewardConfig]):
    differentiable = True

    def __init__(self, cfg: AestheticRewardConfig):
        super().__init__(cfg)
        self.encoder = CLIPImageEncoder(cfg.path, cfg.processor_path, cfg.dtype)
        key = "reward.head_path"
        self.head = MLPHead(head_state(key, load_tensors(key, fetch_file(cfg.head_path, cfg.head_filename))))
        require(
            self.head.in_features == self.encoder.dim,
            key,
            f"the head reads {self.head.in_features}-dim embeddings, but reward.path={cfg.path!r} gives "
            f"{self.encoder.dim}-dim ones. Fix: the head of the same CLIP (sac+logos+ava1-l14-linearMSE.pth with "
            f"openai/clip-vit-large-patch14)",
        )

    def score(self, images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        features = self.encoder(images)  # fp32, L2-normalised
        return self.head(features)
