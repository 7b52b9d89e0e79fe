"""The prompt source's host cost does not grow with the prompt set (launcher/train/data.py, issue 27 item 5): one
permutation per epoch, kept, and the batches exactly those of the per-prompt draw it replaces (a resumed run sees
the prompts it would have seen)."""

from __future__ import annotations

import torch

from launcher.train.data import PromptSource
from launcher.train.data_config import DataConfig

PROMPTS = [f"prompt {i}" for i in range(7)]


def reference_batch(prompts: list[str], seed: int, step: int, n: int) -> list[str]:
    """The former implementation: a full permutation drawn for every prompt of every step."""
    out = []
    for k in range(step * n, step * n + n):
        epoch, pos = divmod(k, len(prompts))
        g = torch.Generator().manual_seed((seed * 1_000_003 + epoch) % 2**64)
        out.append(prompts[torch.randperm(len(prompts), generator=g).tolist()[pos]])
    return out


def test_batches_equal_the_per_prompt_draw_across_epoch_boundaries():
    for n in (1, 3, 7, 10, 16):  # 10 and 16 span two and three epochs in one batch
        source = PromptSource(DataConfig(name="demo", prompts=PROMPTS), seed=5)
        for step in (0, 1, 2, 5, 9, 4, 0):  # out of order: a resume jumps
            assert source.batch(step, n) == reference_batch(PROMPTS, 5, step, n), (n, step)


def test_one_permutation_per_epoch(monkeypatch):
    draws = []
    randperm = torch.randperm

    def counted(*args, **kwargs):
        draws.append(args[0])
        return randperm(*args, **kwargs)

    monkeypatch.setattr(torch, "randperm", counted)
    source = PromptSource(DataConfig(name="demo", prompts=PROMPTS * 100), seed=1)  # 700 prompts
    for step in range(350):  # 2 prompts per step: exactly one epoch
        source.batch(step, 2)
    assert len(draws) == 1, draws
    source.batch(350, 2)
    assert len(draws) == 2  # the next epoch's, once


def test_unshuffled_source_is_file_order():
    source = PromptSource(DataConfig(name="demo", prompts=PROMPTS, shuffle=False))
    assert source.batch(2, 3) == [PROMPTS[6], PROMPTS[0], PROMPTS[1]]
