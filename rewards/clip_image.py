"""The image half of a transformers CLIP model: projected image embeddings of images in [0, 1], preprocessed as the
model's processor says, with tensor operations (:mod:`rewards.preprocess`), so gradients reach the image.

The LAION aesthetic predictor (reward=aesthetic) and the diversity metric (reward=diversity) read the image
embedding of ``openai/clip-vit-large-patch14``: ``CLIPModel.get_image_features`` (the projected, pooled vision
output), which flow_grpo's and DDPO's aesthetic scorers call. The whole ``CLIPModel`` is loaded (its text tower
unused): ``CLIPVisionModelWithProjection`` cannot read the projection size out of a ``CLIPModel`` config.

dtype ``auto``: bf16 on CUDA, fp32 on the CPU, cast on the first call on the final device (as rewards/clip_base.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from rewardflow.dtypes import torch_dtype
from rewards.preprocess import normalize, resize, resize_shortest_and_center_crop

BICUBIC = 3  # PIL.Image.Resampling.BICUBIC, the value processors store


def _setting(d, key: str):
    """A key of a processor size dict (a plain dict or transformers' ``SizeDict``), or None."""
    return d.get(key) if isinstance(d, dict) else getattr(d, key, None)


@dataclass(frozen=True)
class ImageGeometry:
    """The resize / crop / normalisation of a CLIP image processor, applied as tensor operations. Two geometries
    exist among CLIP processors: shortest side + centre crop, and a plain resize to height x width."""

    shortest_edge: int | None
    resize_to: tuple[int, int] | None
    crop: tuple[int, int] | None
    mean: tuple[float, ...]
    std: tuple[float, ...]

    @classmethod
    def from_processor(cls, ip) -> ImageGeometry:
        """The settings of a ``CLIPImageProcessor`` (so a checkpoint's own settings are honoured)."""
        if getattr(ip, "resample", BICUBIC) != BICUBIC:
            raise ValueError(f"processor resample={ip.resample}: only bicubic (3) is implemented as tensor ops")
        if not (ip.do_resize and ip.do_rescale and abs(ip.rescale_factor - 1 / 255) < 1e-9 and ip.do_normalize):
            raise ValueError("the processor must resize, rescale by 1/255 and normalise (CLIP processors do)")
        shortest = _setting(ip.size, "shortest_edge")
        resize_to = None if shortest else (_setting(ip.size, "height"), _setting(ip.size, "width"))
        crop = (_setting(ip.crop_size, "height"), _setting(ip.crop_size, "width")) if ip.do_center_crop else None
        if shortest and crop is None:
            raise ValueError("a shortest-edge resize without a centre crop gives non-square inputs; not supported")
        if resize_to and crop not in (None, resize_to):
            raise ValueError(f"resize to {resize_to} followed by a {crop} crop is not supported")
        return cls(shortest, resize_to, crop, tuple(ip.image_mean), tuple(ip.image_std))

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        """(B, 3, H, W) fp32 in [0, 1] -> the model's normalised pixel input."""
        if self.shortest_edge:
            assert self.crop is not None  # from_processor refuses a shortest-edge resize without a crop
            images = resize_shortest_and_center_crop(images, int(self.shortest_edge), self.crop)
        else:
            assert self.resize_to is not None  # set whenever there is no shortest edge
            images = resize(images, self.resize_to)
        return normalize(images, self.mean, self.std)


class CLIPImageEncoder(nn.Module):
    """Frozen ``CLIPModel`` from ``path`` (a ``CLIPModel`` hub id or folder) with the image
    settings of the processor at ``processor_path`` (None: ``path``). :meth:`forward` gives fp32 embeddings (B, D),
    L2-normalised when ``unit``."""

    def __init__(self, path: str, processor_path: str | None, dtype_name: str):
        super().__init__()
        from transformers import CLIPImageProcessor, CLIPModel

        self.dtype_name = dtype_name
        self.model = CLIPModel.from_pretrained(path, torch_dtype=torch.float32)
        self.geometry = ImageGeometry.from_processor(CLIPImageProcessor.from_pretrained(processor_path or path))
        self.model.requires_grad_(False).eval()

    @property
    def dim(self) -> int:
        return int(self.model.config.projection_dim)

    def forward(self, images: torch.Tensor, unit: bool = True) -> torch.Tensor:
        param = next(self.model.parameters())
        dtype = torch_dtype(self.dtype_name, param.device.type)
        if param.dtype != dtype:
            self.model.to(dtype)
        pixels = self.geometry(images.to(device=param.device, dtype=torch.float32)).to(dtype)
        out = self.model.get_image_features(pixel_values=pixels)
        # transformers 5 returns a ModelOutput whose pooler_output is the projected embedding; 4.x a tensor
        embeds = (out if isinstance(out, torch.Tensor) else out.pooler_output).float()
        return F.normalize(embeds, dim=-1) if unit else embeds
