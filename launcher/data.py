"""Prompt sources: an inline list (``data=demo``) or a .txt / .jsonl file (``data=file``).

Batches are a pure function of (seed, step): epoch e is a permutation seeded by (seed, e), so a resumed run sees
exactly the prompts it would have seen, with no data-loader state to save.
"""
from __future__ import annotations

from typing import Any

import torch

from launcher.data_config import DataConfig
from rewardflow.errors import ConfigErrors
from rewardflow.prompts import load_prompts


class PromptSource:
    """Deterministic prompt batches. ``batch(step, n)`` returns the n prompts of that step."""

    def __init__(self, cfg: DataConfig, seed: int = 0):
        self.prompts = load_prompts(cfg.prompts, cfg.path, cfg.field)
        self.shuffle = cfg.shuffle
        self.seed = seed

    @classmethod
    def check(cls, cfg: Any, errors: ConfigErrors) -> None:
        """The config-check hook of every component (see :mod:`launcher.validate`): the prompts can be read."""
        with errors.collect():
            load_prompts(cfg.data.prompts, cfg.data.path, cfg.data.field)

    def __len__(self) -> int:
        return len(self.prompts)

    def _epoch_order(self, epoch: int) -> list[int]:
        if not self.shuffle:
            return list(range(len(self.prompts)))
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        return torch.randperm(len(self.prompts), generator=g).tolist()

    def batch(self, step: int, n: int) -> list[str]:
        """Prompts ``step * n ... step * n + n - 1`` of the endless, epoch-wise shuffled stream."""
        out = []
        for k in range(step * n, step * n + n):
            epoch, pos = divmod(k, len(self.prompts))
            out.append(self.prompts[self._epoch_order(epoch)[pos]])
        return out
