"""reward=diversity: how different a prompt's samples are, the metric that shows mode collapse under reward hacking
(flow_grpo #233, Flow-Factory #176). For each prompt, the mean over the n(n-1)/2 pairs of its n samples of the
distance between their L2-normalised image embeddings (CLIP ViT-L/14's by default; ``reward.embedding=pixels``:
downsampled pixels, :mod:`rewards.pixel_embedding`, no download; ``reward.distance``: ``cosine``, 1 - cos, or
``euclidean``): 0 when every sample is the same image, larger as they spread.

It scores a prompt's samples together, so it is an evaluation metric (``eval.rewards``), never a training reward:
:meth:`DiversityReward.evaluate` gives each sample's embedding (a video's: the normalised mean of its frames'), and
the evaluation, once every rank's samples are gathered, asks :meth:`DiversityReward.prompt_scores` for one value per
held-out prompt (float64); ``eval/<name>/mean`` and ``/std`` are over prompts (docs/evaluation.md).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rewards.base import Reward
from rewards.clip_image import CLIPImageEncoder
from rewards.diversity_config import Distance, DiversityRewardConfig, Embedding
from rewards.pixel_embedding import PixelEmbedding


def mean_pairwise_distance(features: torch.Tensor, distance: str = Distance.cosine) -> torch.Tensor:
    """Mean distance over the pairs i < j of the rows of ``features`` (n, D), n >= 2, after L2 normalisation."""
    x = F.normalize(features, dim=-1)
    n = x.shape[0]
    if n < 2:
        raise ValueError(f"diversity needs at least 2 samples of a prompt, got {n}")
    i, j = torch.triu_indices(n, n, offset=1)
    if distance == Distance.cosine:
        d = 1.0 - (x[i] * x[j]).sum(-1)
    else:
        d = torch.linalg.vector_norm(x[i] - x[j], dim=-1)
    return d.mean()


class DiversityReward(Reward[DiversityRewardConfig]):
    differentiable = False
    per_prompt = True

    def __init__(self, cfg: DiversityRewardConfig):
        super().__init__(cfg)
        self.distance = cfg.distance
        self.encoder: torch.nn.Module = (
            PixelEmbedding(cfg.pixel_size)
            if cfg.embedding == Embedding.pixels
            else CLIPImageEncoder(cfg.path, cfg.processor_path, cfg.dtype)
        )

    def score(self, images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        raise RuntimeError(
            "reward=diversity scores a prompt's samples together, not one image: it is an evaluation metric. Fix: "
            "+reward@eval.rewards.diversity=diversity"
        )

    @torch.no_grad()
    def evaluate(self, images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        """Each sample's unit embedding (B, D); a video's is the normalised mean of its frames'."""
        flat, _, frames = self.flatten_frames(images, prompts)
        features = self.encoder(flat)
        if frames:
            features = F.normalize(features.view(-1, frames, features.shape[-1]).mean(1), dim=-1)
        return features

    def prompt_scores(self, features: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        """One diversity per distinct prompt (in order of first appearance), from the embeddings of all samples."""
        groups: dict[str, list[int]] = {}
        for k, p in enumerate(prompts):
            groups.setdefault(p, []).append(k)
        x = features.double()
        return torch.stack([mean_pairwise_distance(x[idx], self.distance) for idx in groups.values()])
