"""Config of the prompt sources (launcher/train/data.py): data=demo (an inline list), data=file, and the papers'
named prompt sets data=drawbench|geneval|ocr|pickscore|hpdv2 (rewardflow/prompt_sets.py, docs/data.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from omegaconf import MISSING

from rewardflow.errors import ConfigErrors
from rewardflow.prompt_sets import PromptSet, Split
from rewardflow.prompts import DEFAULT_ENCODING, data_prompts, held_out_count


@dataclass
class DataConfig:
    _target_: str = "launcher.train.data.PromptSource"
    name: str = MISSING
    prompts: Optional[list[str]] = None  # inline prompt list (data=demo)
    path: Optional[str] = None  # .txt (one prompt per line) or .jsonl file (data=file)
    field: str = "prompt"  # jsonl key holding the prompt
    encoding: str = DEFAULT_ENCODING  # text encoding of the file (a Python codec name: latin-1, utf-16, ...)
    shuffle: bool = True  # reshuffle every epoch (deterministic in trainer.seed)
    # a named prompt set: trains on its `split` (downloaded once into the cache; data.path: a local copy of that
    # split's file instead), and the evaluation's held-out prompts default to its test split
    set: Optional[PromptSet] = None
    split: Split = Split.train

    @classmethod
    def check(cls, cfg: Any, errors: ConfigErrors) -> None:
        """The config-check hook (run by :mod:`launcher.validate` before torch is imported): the prompts can be read
        (a named set's split is downloaded here on first use, so a missing one is reported before anything loads)."""
        d = cfg.data
        errors.require(
            d.set is None or not d.prompts,
            "data.prompts",
            f"and data.set={d.set} both give the training prompts. Fix: keep one (data.prompts=null)",
        )
        e = cfg.eval
        errors.require(
            d.split != Split.test or not e.every or e.prompts is not None or held_out_count(e) > 0,
            "data.split",
            f"test trains on data.set={d.set}'s test split, which the evaluation scores by default: the scores would be "
            f"of trained prompts. Fix: data.split=train, or evaluate other prompts (eval.prompts=...)",
        )
        with errors.collect():
            data_prompts(d)


SCHEMAS = {"data": {"prompts": DataConfig}}
