"""Schemas of prompt sources and loggers."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from omegaconf import MISSING

@dataclass
class DataConfig:
    _target_: str = "launcher.data.PromptSource"
    name: str = MISSING
    prompts: Optional[list[str]] = None   # inline prompt list (data=demo)
    path: Optional[str] = None            # .txt (one prompt per line) or .jsonl file (data=file)
    field: str = "prompt"                 # jsonl key holding the prompt
    shuffle: bool = True                  # reshuffle every epoch (deterministic in trainer.seed)


@dataclass
class WandbLoggerConfig:
    _target_: str = "launcher.wandb_logger.WandbLogger"
    name: str = "wandb"
    project: Optional[str] = None     # None: WANDB_PROJECT (or a W&B settings file), else "rewardflow"
    entity: Optional[str] = None      # None: WANDB_ENTITY (or a W&B settings file), else the account's default
    mode: str = "auto"                # auto (WANDB_MODE, else online iff logged in) | online | offline | disabled
    group: Optional[str] = None       # default: the sweep name for -m runs, else method name
    tags: list[str] = field(default_factory=list)
    run_name: Optional[str] = None    # default: built from the command-line overrides
    log_images: bool = True


@dataclass
class NoLoggerConfig:
    _target_: Optional[str] = None
    name: str = "none"


SCHEMAS = {"data": {"prompts": DataConfig}, "logger": {"wandb": WandbLoggerConfig, "none": NoLoggerConfig}}
