"""Config of model=tiny_flux_pretrained: the tiny FLUX twin with its transformer pre-trained by flow matching
(models/tiny_flux_pretrained.py), the starting point of the claim studies and of the comparison protocol."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from models.tiny_flux_config import TinyFluxModelConfig
from rewardflow.errors import ConfigErrors


@dataclass
class TinyFluxPretrainedModelConfig(TinyFluxModelConfig):
    _target_: str = "models.tiny_flux_pretrained.TinyFluxPretrainedBackbone"
    name: str = "tiny_flux_pretrained"
    # Adam steps of flow-matching pre-training (batch 32, lr 1e-3): the claim studies' 600 (scripts/claim_studies/
    # jagg.py, flash.py); each value is its own folder in the cache, built once (0.13 s a step on one CPU thread)
    pretrain_steps: int = 600

    @classmethod
    def check(cls, cfg: Any, errors: ConfigErrors) -> None:
        super().check(cfg, errors)
        n = cfg.model.pretrain_steps
        errors.require(
            n >= 1,
            "model.pretrain_steps",
            f"must be >= 1 (got {n}): the flow-matching steps of the twin's pre-training. Fix: model.pretrain_steps=600"
            f" (the claim studies'), or model=tiny_flux for the random-weight twin",
        )


SCHEMAS = {"model": {"tiny_flux_pretrained": TinyFluxPretrainedModelConfig}}
