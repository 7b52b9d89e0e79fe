"""JPEG compressibility (DDPO's classic non-differentiable reward): minus the JPEG size in kilobytes."""

from __future__ import annotations

import io

import numpy as np
import torch
from PIL import Image

from rewards.base import Reward
from rewards.jpeg_config import JpegRewardConfig


class JpegCompressibility(Reward[JpegRewardConfig]):
    differentiable = False

    def __init__(self, cfg: JpegRewardConfig):
        super().__init__(cfg)
        self.quality = cfg.quality

    @torch.no_grad()
    def score(self, images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        arr = (images.detach().float().clamp(0, 1) * 255).round().to(torch.uint8).permute(0, 2, 3, 1).cpu().numpy()
        sizes = []
        for im in arr:
            buf = io.BytesIO()
            Image.fromarray(np.ascontiguousarray(im)).save(buf, format="JPEG", quality=self.quality)
            sizes.append(buf.tell() / 1000.0)
        return -torch.tensor(sizes, dtype=torch.float32, device=images.device)
