"""Config of model=tiny_flux: the tiny random twin of FLUX.1-dev (models/tiny_flux.py), for CPU runs and tests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from models.flux_config import FluxModelConfig
from models.twins_config import TinyTwinConfig


@dataclass
class TinyFluxModelConfig(TinyTwinConfig, FluxModelConfig):
    #: the twin's VAE factor (2) x the 2x2 packing (tests/test_model_checks.py checks it against the twin's VAE)
    image_size_multiple: ClassVar[int] = 4
    _target_: str = "models.tiny_flux.TinyFluxBackbone"
    name: str = "tiny_flux"
    max_sequence_length: int = 16


SCHEMAS = {"model": {"tiny_flux": TinyFluxModelConfig}}
