"""Config of model=tiny_qwenimage: the tiny random twin of Qwen-Image (models/tiny_qwenimage.py). Its VAE is random:
runs test the mechanics, not colour learning. CFG on, as in the model card."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from models.qwenimage_config import QwenImageModelConfig
from models.twins_config import TinyTwinConfig


@dataclass
class TinyQwenImageModelConfig(TinyTwinConfig, QwenImageModelConfig):
    #: the twin's VAE factor (4) x the 2x2 packing (tests/test_model_checks.py checks it against the twin's VAE)
    image_size_multiple: ClassVar[int] = 8
    _target_: str = "models.tiny_qwenimage.TinyQwenImageBackbone"
    name: str = "tiny_qwenimage"
    max_sequence_length: int = 32


SCHEMAS = {"model": {"tiny_qwenimage": TinyQwenImageModelConfig}}
