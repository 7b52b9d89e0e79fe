"""Prompt sources: an inline list (``data=demo``) or a .txt / .jsonl file (``data=file``).

Batches are a pure function of (seed, step): epoch e is a permutation seeded by (seed, e), so a resumed run sees
exactly the prompts it would have seen, with no data-loader state to save. ``eval.split=N`` (or data=file's
``eval.default_split``: :func:`rewardflow.prompts.held_out_count`) holds N prompts out of training
(:func:`split_prompts`) for the held-out evaluation.
"""

from __future__ import annotations

import torch

from launcher.train.data_config import DataConfig
from rewardflow.errors import ConfigError
from rewardflow.prompts import data_prompts

#: seed of the held-out split: fixed, so every method and seed trains and evaluates on the same prompts
SPLIT_SEED = 0


def split_prompts(prompts: list[str], held_out: int, key: str = "eval.split") -> tuple[list[str], list[str]]:
    """``(train, held_out)``: ``held_out`` prompts drawn by a fixed permutation (not ``trainer.seed``), both parts
    in file order. The split depends only on the prompt list and N, so turning evaluation on or off, or changing the
    seed, never changes the training prompts. ``key``: the config key that set N, for the error message."""
    if held_out <= 0:
        return list(prompts), []
    if held_out >= len(prompts):
        if key == "eval.split":
            raise ConfigError(
                f"eval.split={held_out} holds out every one of the {len(prompts)} data prompts. Fix: a "
                f"smaller eval.split, or a held-out prompt file with eval.prompts=/path/prompts.txt"
            )
        if key == "eval.default_split":
            raise ConfigError(
                f"eval.default_split={held_out}: data=file holds {held_out} prompts out of training for the "
                f"held-out evaluation by default, and the file has {len(prompts)}. Fix: eval.split=N (fewer than "
                f"{len(prompts)}), a held-out prompt file with eval.prompts=/path/prompts.txt, or no evaluation "
                f"(every prompt trained on): eval.every=0"
            )
        raise ConfigError(
            f"{key}={held_out} takes every one of the {len(prompts)} prompts it splits. Fix: a smaller {key}"
        )
    order = torch.randperm(len(prompts), generator=torch.Generator().manual_seed(SPLIT_SEED)).tolist()
    chosen = set(order[:held_out])
    return ([p for i, p in enumerate(prompts) if i not in chosen], [p for i, p in enumerate(prompts) if i in chosen])


class PromptSource:
    """Deterministic prompt batches. ``batch(step, n)`` returns the n prompts of that step; ``held_out`` prompts
    (``eval.split``) are left out of training (:func:`split_prompts`)."""

    def __init__(self, cfg: DataConfig, seed: int = 0, held_out: int = 0, held_out_key: str = "eval.split"):
        self.prompts = split_prompts(data_prompts(cfg), held_out, held_out_key)[0]
        self.shuffle = cfg.shuffle
        self.seed = seed
        self._order: tuple[int, torch.Tensor] | None = None  # (epoch, its permutation): the last one drawn

    def __len__(self) -> int:
        return len(self.prompts)

    def _epoch_order(self, epoch: int) -> torch.Tensor:
        """The epoch's permutation (long tensor), drawn once per epoch and kept: a step reads a slice of it, so the
        host cost of a batch does not grow with the prompt set (a draw per prompt per step took 3 s at 1 M prompts;
        scripts/bench_data.py). Seeded by (seed, epoch) only, so a resumed run draws the same order."""
        if self._order is not None and self._order[0] == epoch:
            return self._order[1]
        if not self.shuffle:
            order = torch.arange(len(self.prompts))
        else:
            g = torch.Generator().manual_seed((self.seed * 1_000_003 + epoch) % 2**64)  # torch seeds are 64-bit
            order = torch.randperm(len(self.prompts), generator=g)
        self._order = (epoch, order)
        return order

    def batch(self, step: int, n: int) -> list[str]:
        """Prompts ``step * n ... step * n + n - 1`` of the endless, epoch-wise shuffled stream."""
        out: list[str] = []
        k, end = step * n, step * n + n
        while k < end:  # at most one slice per epoch the batch touches
            epoch, pos = divmod(k, len(self.prompts))
            take = min(end - k, len(self.prompts) - pos)
            out.extend(self.prompts[i] for i in self._epoch_order(epoch)[pos : pos + take].tolist())
            k += take
        return out
