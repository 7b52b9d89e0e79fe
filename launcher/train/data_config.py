"""Config of the prompt sources (launcher/train/data.py): data=demo (an inline list) and data=file."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from omegaconf import MISSING

from rewardflow.prompts import DEFAULT_ENCODING


@dataclass
class DataConfig:
    _target_: str = "launcher.train.data.PromptSource"
    name: str = MISSING
    prompts: Optional[list[str]] = None  # inline prompt list (data=demo)
    path: Optional[str] = None  # .txt (one prompt per line) or .jsonl file (data=file)
    field: str = "prompt"  # jsonl key holding the prompt
    encoding: str = DEFAULT_ENCODING  # text encoding of the file (a Python codec name: latin-1, utf-16, ...)
    shuffle: bool = True  # reshuffle every epoch (deterministic in trainer.seed)


SCHEMAS = {"data": {"prompts": DataConfig}}
