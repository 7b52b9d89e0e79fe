"""The tensor preprocessing of the preference rewards, pinned against the PIL pipelines the peers use (issue 7).

References are independent code run on the same uint8 image: open_clip's eval transform in HPSv2's configuration
(longest side, pad with black) and transformers' PIL CLIP image processor (shortest side, centre crop). Differences
are what uint8 rounding allows (about 1/255 before normalisation, i.e. ~0.016 after dividing by CLIP's std).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from rewards.preprocess import CLIP_MEAN, CLIP_STD, normalize, resize_longest_and_pad, resize_shortest_and_center_crop

SHAPES = [(96, 64), (64, 96), (300, 200), (32, 32), (100, 256), (1024, 768)]
UINT8_TOL = 2.5 / 255 / min(CLIP_STD)  # PIL rounds to uint8 after resampling; allow 2.5 levels after normalising


def smooth_image(h: int, w: int, seed: int = 0) -> torch.Tensor:
    """A (1, 3, H, W) image on the uint8 grid with structure at several scales (so resampling matters)."""
    g = torch.Generator().manual_seed(seed)
    coarse = F.interpolate(torch.rand(1, 3, h // 8 + 1, w // 8 + 1, generator=g), size=(h, w), mode="bilinear")
    return ((0.8 * coarse + 0.2 * torch.rand(1, 3, h, w, generator=g)) * 255).round() / 255


def to_pil(img: torch.Tensor) -> Image.Image:
    return Image.fromarray((img[0].permute(1, 2, 0) * 255).round().byte().numpy())


def hps_reference(pil: Image.Image) -> torch.Tensor:
    """HPSv2's eval transform: open_clip's ResizeKeepRatio(longest) + CenterCropOrPad(fill 0) + CLIP mean/std."""
    import open_clip

    return open_clip.image_transform(
        224, is_train=False, mean=CLIP_MEAN, std=CLIP_STD, resize_mode="longest", interpolation="bicubic", fill_color=0
    )(pil)[None]


def hf_clip_reference(pil: Image.Image) -> torch.Tensor:
    """The transformers PIL image processor with the CLIP-H / ViT-L/14 settings."""
    from transformers import CLIPImageProcessorPil

    proc = CLIPImageProcessorPil(
        size={"shortest_edge": 224},
        crop_size={"height": 224, "width": 224},
        resample=3,
        image_mean=CLIP_MEAN,
        image_std=CLIP_STD,
    )
    return torch.from_numpy(np.asarray(proc(images=[pil], return_tensors="np")["pixel_values"]))


@pytest.mark.parametrize("h,w", SHAPES)
def test_hps_preprocessing_matches_hpsv2_eval_transform(h, w):
    img = smooth_image(h, w)
    ours, ref = normalize(resize_longest_and_pad(img, 224)), hps_reference(to_pil(img))
    assert ours.shape == ref.shape == (1, 3, 224, 224)
    diff = (ours - ref).abs()
    assert diff.max() < UINT8_TOL and diff.mean() < 0.01, (float(diff.max()), float(diff.mean()))
    if h != w:  # padded with black (before normalisation), not cropped
        black = normalize(torch.zeros(1, 3, 1, 1))
        assert torch.allclose(ours[..., 0, 0], black[..., 0, 0], atol=1e-6) or torch.allclose(
            ours[..., -1, -1], black[..., 0, 0], atol=1e-6
        )


@pytest.mark.parametrize("h,w", SHAPES)
def test_clip_preprocessing_matches_the_hf_processor(h, w):
    img = smooth_image(h, w, seed=1)
    ours, ref = normalize(resize_shortest_and_center_crop(img, 224, (224, 224))), hf_clip_reference(to_pil(img))
    assert ours.shape == ref.shape == (1, 3, 224, 224)
    diff = (ours - ref).abs()
    assert diff.max() < UINT8_TOL and diff.mean() < 0.01, (float(diff.max()), float(diff.mean()))


def test_the_references_tell_pad_from_crop():
    """The tolerance above is tight enough to catch the classic mix-up (cropping for HPS, padding for CLIP)."""
    img = smooth_image(300, 200, seed=2)
    wrong = normalize(resize_shortest_and_center_crop(img, 224, (224, 224)))
    assert (wrong - hps_reference(to_pil(img))).abs().mean() > 10 * 0.01
    naive = normalize(F.interpolate(img, size=(224, 224), mode="bicubic"))  # squash, a = -0.75, no antialias
    assert (naive - hf_clip_reference(to_pil(img))).abs().max() > UINT8_TOL


def test_preprocessing_is_differentiable():
    img = smooth_image(96, 64).requires_grad_(True)
    out = (
        normalize(resize_longest_and_pad(img, 224)).square().sum()
        + normalize(resize_shortest_and_center_crop(img, 224, (224, 224))).square().sum()
    )
    out.backward()
    assert torch.isfinite(img.grad).all() and img.grad.abs().sum() > 0
