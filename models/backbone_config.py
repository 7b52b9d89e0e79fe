"""The config fields every model family shares (:class:`models.backbone.Backbone` checks them)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from omegaconf import MISSING


class Finetune(StrEnum):
    lora = "lora"  # a peft adapter on model.lora_targets; the frozen reference is the adapter switched off
    full = "full"  # every transformer weight; the frozen reference, when a method needs one, is a copy


@dataclass
class ModelConfig:
    _target_: str = MISSING
    name: str = MISSING
    finetune: Finetune = Finetune.lora
