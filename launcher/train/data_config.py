"""Config of the prompt sources (launcher/train/data.py): data=demo (an inline list) and data=file."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from omegaconf import MISSING

from rewardflow.errors import ConfigErrors
from rewardflow.prompts import DEFAULT_ENCODING, load_prompts


@dataclass
class DataConfig:
    _target_: str = "launcher.train.data.PromptSource"
    name: str = MISSING
    prompts: Optional[list[str]] = None  # inline prompt list (data=demo)
    path: Optional[str] = None  # .txt (one prompt per line) or .jsonl file (data=file)
    field: str = "prompt"  # jsonl key holding the prompt
    encoding: str = DEFAULT_ENCODING  # text encoding of the file (a Python codec name: latin-1, utf-16, ...)
    shuffle: bool = True  # reshuffle every epoch (deterministic in trainer.seed)

    @classmethod
    def check(cls, cfg: Any, errors: ConfigErrors) -> None:
        """The config-check hook (run by :mod:`launcher.validate` before torch is imported): the prompts can be read."""
        with errors.collect():
            load_prompts(cfg.data.prompts, cfg.data.path, cfg.data.field, cfg.data.encoding)


SCHEMAS = {"data": {"prompts": DataConfig}}
