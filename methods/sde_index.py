"""Where the single SDE step k* of a Flash-GRPO rollout sits (docs/methods/flash_grpo.md#where-the-sde-step-sits).

Iso-temporal grouping: all G rollouts of a prompt group share k* (so the group baseline compares samples at the
same SDE timestep), while different groups get their own k*, so a batch covers many timesteps. k* is keyed by
the group id, never by an accumulation round or a rank (the released 8-GPU script redraws it per round).
"""

from __future__ import annotations

import torch

from methods.flash_grpo_config import SdeIndexSampling
from rewardflow.distributed import all_gather_objects


def default_sde_index_pool(num_steps: int) -> list[int]:
    """The official pool: the first half of the steps, ``range(N // 2)`` (steps 0-9 of Wan's 20)."""
    return list(range(max(1, num_steps // 2)))


def draw_sde_indices(n: int, pool: list[int], sampling: str, generator: torch.Generator) -> torch.Tensor:
    """``n`` step indices from ``pool`` (long, CPU).

    Args:
        sampling: ``iid``: independent uniform draws (the official code); ``stratified``: successive random
            permutations of the pool tiled over the ``n`` units, so a batch of ``len(pool)`` prompts covers every
            step once (our reading of the paper's "hierarchical" sampling).
    """
    pool_t = torch.as_tensor(list(pool), dtype=torch.long)
    if sampling == "iid":
        return pool_t[torch.randint(len(pool_t), (n,), generator=generator)]
    if sampling == "stratified":
        rounds = -(-n // len(pool_t))
        order = torch.cat([torch.randperm(len(pool_t), generator=generator) for _ in range(rounds)])
        return pool_t[order[:n]]
    raise ValueError(f"sde_index_sampling must be one of {', '.join(SdeIndexSampling)}, got {sampling!r}")


def group_sde_indices(
    group_keys: list, pool: list[int], sampling: str, iso_temporal: bool, generator: torch.Generator
) -> torch.Tensor:
    """k* of every row (B,): one draw per group id (``iso_temporal``) or one per row (the Fast1 ablation).

    Group ids must identify a group across ranks. Rank 0 draws for every group of the step and its table is used
    everywhere, so the rows of a group spread over several ranks agree (identity in one process).
    """
    if not iso_temporal:
        return draw_sde_indices(len(group_keys), pool, sampling, generator)
    local = list(dict.fromkeys(group_keys))
    every = list(dict.fromkeys(k for keys in all_gather_objects(local) for k in keys))
    table = dict(zip(every, draw_sde_indices(len(every), pool, sampling, generator).tolist()))
    table = all_gather_objects(table)[0]
    return torch.tensor([table[k] for k in group_keys], dtype=torch.long)
