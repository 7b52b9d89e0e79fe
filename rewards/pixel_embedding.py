"""A download-free image embedding (``reward=diversity reward.embedding=pixels``; docs/rewards.md#diversity): the
image area-averaged to ``size`` x ``size`` pixels, mapped from [0, 1] to [-1, 1] (so mid-grey is the origin and
cosine distances use the whole sphere), flattened to 3 size^2 values and L2-normalised, as CLIP's embeddings are. A cheap stand-in for CLIP's embedding: it sees
colour and layout, not content, and needs no weights, so the CPU demo's evaluation scores diversity offline."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class PixelEmbedding(nn.Module):
    """(B, 3, H, W) images in [0, 1] -> (B, 3 size^2) float32 unit embeddings (mid-grey: the zero vector)."""

    def __init__(self, size: int):
        super().__init__()
        self.size = size

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        pooled = F.adaptive_avg_pool2d(images.float(), self.size)
        return F.normalize((pooled * 2.0 - 1.0).flatten(1), dim=-1)
