"""CLIP-family image preprocessing as differentiable tensor operations on (B, 3, H, W) batches in [0, 1].

The peers preprocess through PIL (uint8, per image), which cuts the gradient and costs a host round-trip. These
functions reproduce the same geometry and normalisation on tensors, so one reward module serves GRPO (no grad) and
adjoint methods (grad). Tests pin them against the PIL-based references (HPSv2's eval transform, the Hugging Face
CLIP image processor) on the same images.

Resampling is bicubic with ``antialias=True``: torch's anti-aliased bicubic kernel uses PIL's coefficient (a = -0.5)
and PIL's support widening when downscaling, whereas plain ``mode="bicubic"`` uses a = -0.75 and aliases when a
1024 px image goes to 224 px. PIL writes uint8, so results are clamped to [0, 1] like PIL's output.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

# OpenAI CLIP normalisation, used by HPSv2 (open_clip ViT-H-14), PickScore and CLIP ViT-L/14 alike
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def resize(images: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """Bicubic, anti-aliased resize to ``size`` = (height, width), clamped to [0, 1] (PIL semantics)."""
    if tuple(images.shape[-2:]) == tuple(size):
        return images
    out = F.interpolate(images, size=size, mode="bicubic", align_corners=False, antialias=True)
    return out.clamp(0.0, 1.0)


def resize_longest_and_pad(images: torch.Tensor, size: int, fill: float = 0.0) -> torch.Tensor:
    """HPSv2's eval transform geometry (``ResizeMaxSize``): scale so the longest side is ``size`` (sides rounded),
    then pad to ``size`` x ``size`` with ``fill`` (black, before normalisation), the extra pixel going right/bottom.
    Nothing is cropped, so the whole generated image is scored."""
    h, w = images.shape[-2:]
    scale = size / max(h, w)
    new_h, new_w = round(h * scale), round(w * scale)
    out = resize(images, (new_h, new_w))
    pad_h, pad_w = size - new_h, size - new_w
    if pad_h or pad_w:
        out = F.pad(out, (pad_w // 2, pad_w - pad_w // 2, pad_h // 2, pad_h - pad_h // 2), value=fill)
    return out


def resize_shortest_and_center_crop(
    images: torch.Tensor, size: int, crop: tuple[int, int], round_offset: bool = False
) -> torch.Tensor:
    """The Hugging Face CLIP image processor's geometry: shortest side to ``size`` (the long side truncated as
    ``int(size * long / short)``), then a centre crop of ``crop`` = (height, width) with the offset floored;
    ``round_offset``: rounded as torchvision's ``CenterCrop`` does (``int(round(d / 2))``, the OpenAI CLIP and
    ImageReward transforms), which differs by one pixel when the margin is odd."""
    h, w = images.shape[-2:]
    if h <= w:
        new_h, new_w = size, int(size * w / h)
    else:
        new_h, new_w = int(size * h / w), size
    out = resize(images, (new_h, new_w))
    ch, cw = crop
    if ch > new_h or cw > new_w:
        raise ValueError(f"centre crop {crop} is larger than the resized image {(new_h, new_w)}")
    if round_offset:
        top, left = int(round((new_h - ch) / 2.0)), int(round((new_w - cw) / 2.0))
    else:
        top, left = (new_h - ch) // 2, (new_w - cw) // 2
    return out[..., top : top + ch, left : left + cw]


def normalize(images: torch.Tensor, mean=CLIP_MEAN, std=CLIP_STD) -> torch.Tensor:
    m = torch.tensor(mean, dtype=images.dtype, device=images.device).view(1, -1, 1, 1)
    s = torch.tensor(std, dtype=images.dtype, device=images.device).view(1, -1, 1, 1)
    return (images - m) / s
