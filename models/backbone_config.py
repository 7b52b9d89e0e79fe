"""The config fields every model family shares, and the config-check hook of the model group (run by
``launcher.validate`` before torch is imported: docs/configuration.md#validation)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar

from omegaconf import MISSING

from rewardflow.errors import ConfigErrors


class Finetune(StrEnum):
    lora = "lora"  # a peft adapter on model.lora_targets; the frozen reference is the adapter switched off
    full = "full"  # every transformer weight; the frozen reference, when a method needs one, is a copy


@dataclass
class ModelConfig:
    #: modules the family's code imports lazily (its diffusers pipeline: the transformer, VAE and text encoders'
    #: classes), which a local sweep's fork server imports once for every point (launcher/cluster/point_process.py)
    preload_modules: ClassVar[tuple[str, ...]] = ()

    _target_: str = MISSING
    name: str = MISSING
    finetune: Finetune = Finetune.lora

    @classmethod
    def check(cls, cfg: Any, errors: ConfigErrors) -> None:
        """The config-check hook of the model group: record in ``errors`` the values this family cannot run with.
        ``cfg`` is the whole run config (typed; the model's is ``cfg.model``). It imports no torch, so these errors
        come before anything heavy is loaded; what needs the family's code or files is the model class's
        ``check_with_code``. The base checks the LoRA keys of the families that have them; a family's hook calls it
        first."""
        m = cfg.model
        if hasattr(m, "lora_rank"):
            errors.require(
                m.lora_rank >= 1,
                "model.lora_rank",
                f"must be >= 1 (got {m.lora_rank}): the rank of the LoRA adapter (model.finetune=lora). Fix: e.g. "
                f"model.lora_rank=32",
            )
        if hasattr(m, "lora_alpha"):
            suggested = 2 * max(1, getattr(m, "lora_rank", 1))
            errors.require(
                math.isfinite(m.lora_alpha) and m.lora_alpha > 0,
                "model.lora_alpha",
                f"must be a finite number > 0 (got {m.lora_alpha}): the LoRA update is scaled by "
                f"lora_alpha / lora_rank. Fix: e.g. model.lora_alpha={suggested} (2 x model.lora_rank)",
            )
