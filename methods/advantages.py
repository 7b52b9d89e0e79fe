"""GRPO advantages in the two reference definitions (docs/methods/grpo_baselines.md#advantages).

* ``group`` (DanceGRPO): each run of G samples of a prompt is a group; ``A = (r - mean) / (std_unbiased + 1e-8)``.
* ``prompt`` (Flow-GRPO ``PerPromptStatTracker``): rewards grouped by prompt string over the (gathered) batch;
  ``A = (r - mean_prompt) / (std + 1e-4)`` with population std over the prompt's rewards, or over *all* rewards
  when ``global_std`` is set.

Both clamp to ``[-clip, clip]`` (``adv_clip_max`` = 5 in every official script).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from methods.base import Rollout
from methods.grpo_config import Advantage
from rewardflow.distributed import World, all_gather_cat, all_gather_objects


@dataclass
class Advantages:
    values: torch.Tensor  # (B,) clamped advantages
    zero_std_frac: float  # fraction of groups whose rewards are all equal (no learning signal)


def group_ids_from_keys(keys: list) -> torch.Tensor:
    """Map hashable keys (prompt strings or group ids) to dense group indices in first-seen order."""
    seen: dict = {}
    return torch.tensor([seen.setdefault(k, len(seen)) for k in keys], dtype=torch.long)


def compute_advantages(
    rewards: torch.Tensor, keys: list, mode: str = "group", global_std: bool = False, clip: float = 5.0
) -> Advantages:
    """Advantages for ``rewards`` (B,), grouped by ``keys`` (group ids for ``group`` mode, prompts for ``prompt``)."""
    if mode not in tuple(Advantage):
        raise ValueError(f"advantage mode must be one of {', '.join(Advantage)}, got {mode!r}")
    r = rewards.to(torch.float64)
    gid = group_ids_from_keys(keys).to(r.device)
    n_groups = int(gid.max()) + 1
    count = torch.zeros(n_groups, dtype=r.dtype, device=r.device).index_add_(0, gid, torch.ones_like(r))
    mean = torch.zeros_like(count).index_add_(0, gid, r) / count
    centred = r - mean[gid]
    sq = torch.zeros_like(count).index_add_(0, gid, centred**2)
    if mode == "group":
        std = torch.sqrt(sq / (count - 1).clamp(min=1))[gid]  # torch .std(): ddof = 1
        adv = centred / (std + 1e-8)
    else:
        std = r.std(unbiased=False).expand_as(r) if global_std else torch.sqrt(sq / count)[gid]
        adv = centred / (std + 1e-4)
    zero_std = float(((sq / count) <= 1e-24).to(r.dtype).mean())
    return Advantages(values=adv.clamp(-clip, clip).to(rewards.dtype), zero_std_frac=zero_std)


def advantage_keys(rollout: Rollout, mode: str) -> list:
    """What groups the samples for advantages: the prompt group (``group``) or the prompt string (``prompt``)."""
    return rollout.group_keys if mode == Advantage.group else rollout.prompts


def step_advantages(
    rollout: Rollout, keys: list, mode: str, global_std: bool, clip: float, world: World
) -> dict[str, float]:
    """Advantages over the whole step, stored on ``rollout``: rewards and ``keys`` (one per sample) are gathered from
    every rank (``prompt`` mode groups equal prompts over the gathered batch; ``global_std`` needs all rewards), then
    each rank keeps its own rows. Returns the step's advantage metrics."""
    assert rollout.rewards is not None  # score() fills them before prepare_update
    rewards = all_gather_cat(rollout.rewards)
    all_keys = [k for part in all_gather_objects(list(keys)) for k in part]
    adv = compute_advantages(rewards, all_keys, mode, global_std, clip)
    rollout.advantages = adv.values.view(world.world_size, -1)[world.rank].to(rollout.rewards.device)
    return {"reward/zero_std_frac": adv.zero_std_frac, "adv/abs_mean": float(adv.values.abs().mean())}
