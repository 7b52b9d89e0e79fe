"""Config of model=tiny_flux: the tiny random twin of FLUX.1-dev (models/tiny_flux.py), for CPU runs and tests."""

from __future__ import annotations

from dataclasses import dataclass

from models.flux_config import FluxModelConfig
from models.twins_config import TinyTwinConfig


@dataclass
class TinyFluxModelConfig(TinyTwinConfig, FluxModelConfig):
    _target_: str = "models.tiny_flux.TinyFluxBackbone"
    name: str = "tiny_flux"
    max_sequence_length: int = 16


SCHEMAS = {"model": {"tiny_flux": TinyFluxModelConfig}}
