"""Config fields every tiny twin (models/twins.py) sets on top of its family's: a toy size, full fine-tuning, and
where the twin is built."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from models.backbone_config import Finetune
from models.common_config import ActivationCheckpointing


@dataclass
class TinyTwinConfig:
    """Mixed in before the family's config (``class TinyFluxModelConfig(TinyTwinConfig, FluxModelConfig)``), so these
    values replace the family's."""

    path: Optional[str] = None  # null: build the twin in cache_dir and load it through the family's backbone
    seed: int = 0  # seed of the twin's random weights
    cache_dir: Optional[str] = None  # default $REWARDFLOW_CACHE or ~/.cache/rewardflow
    height: int = 32
    width: int = 32
    finetune: Finetune = Finetune.full
    activation_checkpointing: ActivationCheckpointing = ActivationCheckpointing.none
