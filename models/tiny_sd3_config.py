"""Config of model=tiny_sd35m: the tiny random twin of SD3.5 Medium (models/tiny_sd3.py), CFG on as in the recipe."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from models.sd3_config import SD3ModelConfig
from models.twins_config import TinyTwinConfig


@dataclass
class TinySD3ModelConfig(TinyTwinConfig, SD3ModelConfig):
    #: the twin's VAE factor (2) x its 2x2 patches (tests/test_model_checks.py checks it against the twin's VAE)
    image_size_multiple: ClassVar[int] = 4
    _target_: str = "models.tiny_sd3.TinySD3Backbone"
    name: str = "tiny_sd35m"
    max_sequence_length: int = 16


SCHEMAS = {"model": {"tiny_sd35m": TinySD3ModelConfig}}
