"""Config of logger=wandb (launcher/tracking/wandb_logger.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Optional

from rewardflow.errors import ConfigErrors

MAX_TAG_LENGTH = 64  # W&B rejects longer tags when the run starts


class WandbMode(StrEnum):
    auto = "auto"  # WANDB_MODE, else online iff W&B credentials are configured (docs/wandb.md)
    online = "online"
    offline = "offline"  # files under the run dir; `wandb sync` uploads them later
    disabled = "disabled"


@dataclass
class WandbLoggerConfig:
    _target_: str = "launcher.tracking.wandb_logger.WandbLogger"
    name: str = "wandb"
    project: Optional[str] = None  # None: WANDB_PROJECT (or a W&B settings file), else "rewardflow"
    entity: Optional[str] = None  # None: WANDB_ENTITY (or a W&B settings file), else the account's default
    mode: WandbMode = WandbMode.auto
    group: Optional[str] = None  # default: WANDB_RUN_GROUP, else the sweep's for -m runs, else none
    tags: list[str] = field(default_factory=list)  # added to WANDB_TAGS and the method, model and reward
    run_name: Optional[str] = None  # default: WANDB_NAME, else the overrides read plainly ("jagg seed=0 lr=0.0003")
    log_images: bool = True

    @classmethod
    def check(cls, cfg: Any, errors: ConfigErrors) -> None:
        """The config-check hook (run by :mod:`launcher.validate` before torch is imported)."""
        long = [t for t in cfg.logger.tags if len(t) > MAX_TAG_LENGTH]
        errors.require(
            not long,
            "logger.tags",
            f"W&B takes tags of at most {MAX_TAG_LENGTH} characters (got {long}). Fix: shorten them",
        )


SCHEMAS = {"logger": {"wandb": WandbLoggerConfig}}
