"""Config of model=tiny_wan2.1: the tiny random twin of Wan2.1 T2V (models/tiny_wan.py), 5 frames of 32x32 (latent
16x2x8x8). Its VAE is random: runs test the mechanics, not colour learning. CFG on, as in the recipe."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from models.twins_config import TinyTwinConfig
from models.wan_config import WanModelConfig


@dataclass
class TinyWanModelConfig(TinyTwinConfig, WanModelConfig):
    #: the twin's VAE factor (4) x its 2x2 patches (tests/test_model_checks.py checks it against the twin's VAE)
    image_size_multiple: ClassVar[int] = 8
    _target_: str = "models.tiny_wan.TinyWanBackbone"
    name: str = "tiny_wan2.1"
    num_frames: int = 5
    max_sequence_length: int = 16


SCHEMAS = {"model": {"tiny_wan2.1": TinyWanModelConfig}}
