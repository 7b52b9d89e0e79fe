"""Prompt sources: an inline list (``data=demo``) or a .txt / .jsonl file (``data=file``).

Batches are a pure function of (seed, step): epoch e is a permutation seeded by (seed, e), so a resumed run sees
exactly the prompts it would have seen, with no data-loader state to save. ``eval.split=N`` holds N prompts out of
training (:func:`split_prompts`) for the held-out evaluation.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from launcher.errors import ConfigError

SUPPORTED = (".txt", ".jsonl")


def load_prompts(prompts: list[str] | None, path: str | None, field: str = "prompt", key: str = "data.path"
                 ) -> list[str]:
    """Read and check the prompt list. Errors name the config key (``key``, e.g. ``data.path``, and ``data.field``)
    and the fix."""
    if path is None:
        if not prompts:
            raise ConfigError("data: no prompts. Fix: data=demo, or data=file data.path=/path/prompts.txt")
        return [str(p) for p in prompts]
    p = Path(path).expanduser()
    if not p.is_file():
        raise ConfigError(f"{key}={path!r}: no such file. Fix: point {key} at a .txt (one prompt per line) "
                          f"or .jsonl file (one JSON object per line with key data.field={field!r})")
    if p.suffix not in SUPPORTED:
        raise ConfigError(f"{key}={path!r}: unsupported extension {p.suffix!r}; use one of {SUPPORTED}")
    out: list[str] = []
    with p.open() as fh:
        for n, line in enumerate(fh, 1):
            line = line.strip()
            if not line:
                continue
            if p.suffix == ".txt":
                out.append(line)
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ConfigError(f"{key}={path!r} line {n}: not valid JSON ({e.msg})") from None
            if not isinstance(row, dict) or field not in row:
                raise ConfigError(f"{key}={path!r} line {n}: no key {field!r}. Fix: data.field=<key>")
            out.append(str(row[field]))
    if not out:
        raise ConfigError(f"{key}={path!r} holds no prompts")
    return out


#: seed of the held-out split: fixed, so every method and seed trains and evaluates on the same prompts
SPLIT_SEED = 0


def split_prompts(prompts: list[str], held_out: int) -> tuple[list[str], list[str]]:
    """``(train, held_out)``: ``held_out`` prompts drawn by a fixed permutation (not ``trainer.seed``), both parts
    in file order. The split depends only on the prompt list and N, so turning evaluation on or off, or changing the
    seed, never changes the training prompts."""
    if held_out <= 0:
        return list(prompts), []
    if held_out >= len(prompts):
        raise ConfigError(f"eval.split={held_out} holds out every one of the {len(prompts)} data prompts. Fix: a "
                          f"smaller eval.split, or a held-out prompt file with eval.prompts=/path/prompts.txt")
    order = torch.randperm(len(prompts), generator=torch.Generator().manual_seed(SPLIT_SEED)).tolist()
    chosen = set(order[:held_out])
    return ([p for i, p in enumerate(prompts) if i not in chosen], [p for i, p in enumerate(prompts) if i in chosen])


class PromptSource:
    """Deterministic prompt batches. ``batch(step, n)`` returns the n prompts of that step; ``held_out`` prompts
    (``eval.split``) are left out of training (:func:`split_prompts`)."""

    def __init__(self, name: str = "", prompts: list[str] | None = None, path: str | None = None,
                 field: str = "prompt", shuffle: bool = True, seed: int = 0, held_out: int = 0):
        self.prompts = split_prompts(load_prompts(prompts, path, field), held_out)[0]
        self.shuffle = shuffle
        self.seed = seed

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
