"""Per-sample media a person looks at (docs/wandb.md#samples-and-videos): one file per sample beside the run's image
grid, an index of what each file shows, and the captions the dashboard gives them.

A sample is an image ``(3, H, W)`` or a video ``(F, 3, H, W)`` in [0, 1]. An image is written as a PNG; a video of
more than one frame as an animated GIF at the model's frame rate (``model.fps``), which Pillow writes (no video
encoder to install: wandb encodes raw frames only through moviepy, which rewardflow does not depend on) and W&B
plays as a ``wandb.Video``; a one-frame video (Wan with ``model.num_frames=1``) is an image. Files smaller than
128 pixels wide are enlarged by a whole factor, nearest neighbour, as the grids are (the tiny twins' 32-pixel
images), so a published model's samples keep their pixels.

Each folder of samples holds ``samples.jsonl``: one row per file (``file``, ``prompt``, the sample's index and its
scores), the captions without the dashboard.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch is imported where a sample is written: the loggers import this module without it
    import torch

#: the file listing a folder's samples (one JSON row per file)
INDEX = "samples.jsonl"
IMAGE_SUFFIX, VIDEO_SUFFIX = ".png", ".gif"
#: W&B keys of a training step's samples, one captioned image or video each (its grid stays under ``samples``)
SAMPLE_IMAGES_KEY, SAMPLE_VIDEOS_KEY = "samples/images", "samples/videos"
#: W&B key of an evaluation's table of samples (its grid stays under ``eval/samples``)
EVAL_TABLE_KEY = "eval/samples_table"
#: the smallest width a written sample is shown at (a whole-factor nearest-neighbour enlargement below it)
MIN_SHOWN_WIDTH = 128
_SLUG_CHARS = 40  # of the prompt, in a file name


@contextlib.contextmanager
def written_whole(path: Path) -> Iterator[Path]:
    """Yield a temporary name to write ``path`` under; it replaces ``path`` only once written whole, so a full disk
    or a read-only folder never leaves a 0-byte or half-written file behind."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@dataclass(frozen=True)
class MediaFile:
    """One written sample (:func:`save_sample`) and the caption the dashboard shows with it."""

    path: Path
    caption: str

    @property
    def video(self) -> bool:
        """Whether the file is a video (a ``wandb.Video``; else a ``wandb.Image``)."""
        return self.path.suffix == VIDEO_SUFFIX


def to_uint8(sample: torch.Tensor) -> torch.Tensor:
    """A sample in [0, 1] as uint8 on the CPU (a video keeps its frames)."""
    import torch

    return (sample.detach().float().clamp(0, 1) * 255).round().to(torch.uint8).cpu()


def display_scale(width: int) -> int:
    """The whole factor a sample (or a grid's images) of ``width`` pixels is enlarged by to be seen."""
    return max(1, MIN_SHOWN_WIDTH // max(1, width))


def file_stem(position: int, prompt: str) -> str:
    """``<position>_<prompt in lower-case ASCII words>``: files sort in the grid's order and say what they show."""
    slug = re.sub(r"[^a-z0-9]+", "-", prompt.lower()).strip("-")[:_SLUG_CHARS].strip("-")
    return f"{position:04d}_{slug or 'sample'}"


def caption(prompt: str, scores: dict[str, float]) -> str:
    """``<prompt> | <reward> <score> | ...``: what a sample's caption says."""
    return " | ".join([prompt, *(f"{name} {value:.4f}" for name, value in scores.items())])


def save_sample(sample: torch.Tensor, stem: Path, fps: int | None) -> Path:
    """Write one sample (float in [0, 1], or uint8) as ``<stem>.png``, or a video as ``<stem>.gif`` at ``fps``
    frames per second; return the file's path. ``fps`` is needed for a video only."""
    import torch
    from PIL import Image

    pixels = sample if sample.dtype == torch.uint8 else to_uint8(sample)
    if pixels.dim() == 4 and pixels.shape[0] == 1:
        pixels = pixels[0]
    scale = display_scale(int(pixels.shape[-1]))
    if scale > 1:
        pixels = pixels.repeat_interleave(scale, dim=-1).repeat_interleave(scale, dim=-2)
    frames = [Image.fromarray(f.permute(1, 2, 0).contiguous().numpy()) for f in pixels.reshape(-1, *pixels.shape[-3:])]
    stem.parent.mkdir(parents=True, exist_ok=True)
    if len(frames) == 1:
        path = stem.with_name(stem.name + IMAGE_SUFFIX)
        with written_whole(path) as tmp:
            frames[0].save(tmp, format="PNG")
        return path
    if not fps or fps < 1:
        raise ValueError(f"a video sample needs a frame rate >= 1 (got {fps}): set model.fps")
    path = stem.with_name(stem.name + VIDEO_SUFFIX)
    with written_whole(path) as tmp:
        # GIF frame delays are in hundredths of a second: 1000 / fps ms is rounded to 10 ms (16 fps plays at 60 ms)
        frames[0].save(tmp, format="GIF", save_all=True, append_images=frames[1:], duration=1000 / fps, loop=0)
    return path


def write_index(folder: Path, rows: list[dict[str, Any]]) -> Path:
    """``samples.jsonl`` of a folder of samples: one JSON row per file, in the files' order."""
    path = folder / INDEX
    folder.mkdir(parents=True, exist_ok=True)
    with written_whole(path) as tmp:
        tmp.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path
