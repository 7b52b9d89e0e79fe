"""Which trained steps form JAGG groups, and which groups JAGG handles (docs/methods/jagg.md#groups-and-routing).

The M trainable steps of a rollout (the baseline's rule, in denoising order: sigma decreasing) are cut into
G = M // W groups of W consecutive steps. The first ``floor(jagg_frac G)`` groups, the high-noise end where the
velocity is closest to linear in (z, t), are JAGG groups; the rest are trained exactly. When M is not a multiple of
W the last ``M mod W`` steps (the lowest-noise ones) form one extra *tail* group that is always trained exactly
(``remainder=exact``), or the config is rejected (``remainder=error``).

Optionally (``group_fraction < 1``, after the April-2026 prototype) a step trains only a random subset of the G full
groups, order kept. The prototype drew the subset per sample; here it is drawn once per step and shared by every
sample (and, in multi-process runs, every rank), because every rank must run the same sequence of transformer passes
for FSDP's collectives to match, and JAGG and exact groups run different passes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from methods.jagg_config import Remainder


def floor_frac(frac: float, n: int) -> int:
    """``floor(frac n)`` robust to float error (0.29 * 100 = 28.999... must give 29)."""
    return int(math.floor(frac * n + 1e-9))


@dataclass(frozen=True)
class GroupAssignment:
    """The groups a step trains, as the trainer-facing ``train_steps`` plus the group index of every slot.

    Args:
        steps: (B, T) transition indices, slot after slot (W columns per full group, then the tail's columns).
        groups: group index of each of the S slots (the same for every sample); the tail group has index G.
        slot_sizes: number of columns of each slot (W, ..., W[, tail]).
    """

    steps: torch.Tensor
    groups: tuple[int, ...]
    slot_sizes: tuple[int, ...]

    def slots(self) -> list[tuple[int, slice]]:
        """``(group, columns of train_steps)`` for every slot, in training order."""
        out, start = [], 0
        for group, size in zip(self.groups, self.slot_sizes):
            out.append((group, slice(start, start + size)))
            start += size
        return out


@dataclass(frozen=True)
class GroupLayout:
    """Partition of M trainable steps into groups of W, and the routing of groups to JAGG or exact backward.

    Args:
        num_steps: M, the number of trainable steps per sample.
        window: W, steps per group (>= 2).
        jagg_frac: JAGG handles the first ``floor(jagg_frac G)`` groups (floor: see
            docs/methods/jagg.md#reconstructed-or-unconfirmed-choices).
        remainder: ``exact`` (a trailing exact group of ``M mod W`` steps) or ``error`` (M must divide by W).
    """

    num_steps: int
    window: int
    jagg_frac: float
    remainder: str = "exact"

    def __post_init__(self):
        if self.window < 2 or self.num_steps < self.window:
            raise ValueError(f"need 2 <= window <= num_steps (got window={self.window}, num_steps={self.num_steps})")
        if self.remainder not in tuple(Remainder):
            raise ValueError(f"remainder must be one of {', '.join(Remainder)}, got {self.remainder!r}")
        if self.remainder == "error" and self.tail:
            raise ValueError(f"{self.num_steps} steps do not split into groups of {self.window}")

    @property
    def num_groups(self) -> int:
        """G: full groups of W steps."""
        return self.num_steps // self.window

    @property
    def tail(self) -> int:
        """Steps in the trailing exact group (0 if M is a multiple of W)."""
        return self.num_steps % self.window

    @property
    def num_jagg(self) -> int:
        """n_J: the JAGG groups are 0 .. n_J - 1."""
        return floor_frac(self.jagg_frac, self.num_groups)

    def is_jagg(self, group: int) -> bool:
        return group < self.num_jagg

    def backward_rows_per_sample(self) -> int:
        """Transformer backward rows per sample when every group is trained: 2 per JAGG group, W per exact one."""
        return 2 * self.num_jagg + self.window * (self.num_groups - self.num_jagg) + self.tail

    def choose_groups(self, group_fraction: float = 1.0, generator: torch.Generator | None = None) -> tuple[int, ...]:
        """The full groups a step trains: all of them, or a random ``max(1, floor(group_fraction G))``, in order."""
        k = max(1, floor_frac(group_fraction, self.num_groups))
        if k >= self.num_groups:
            return tuple(range(self.num_groups))
        return tuple(torch.randperm(self.num_groups, generator=generator)[:k].sort().values.tolist())

    def assign(self, trainable: torch.Tensor, groups: tuple[int, ...] | None = None) -> GroupAssignment:
        """Lay the chosen groups' steps out as ``train_steps``.

        Args:
            trainable: (B, M) the trainable transitions of each sample, in denoising order.
            groups: full groups to train (from :meth:`choose_groups`; default all). The tail group, if any, is always
                trained, last.
        """
        b, m = trainable.shape
        if m != self.num_steps:
            raise ValueError(f"rollout has {m} trainable steps, the layout expects {self.num_steps}")
        groups = tuple(range(self.num_groups)) if groups is None else tuple(groups)
        w = self.window
        positions = [p for g in groups for p in range(g * w, (g + 1) * w)]
        slot_sizes = (w,) * len(groups)
        if self.tail:
            positions += list(range(self.num_groups * w, m))
            groups, slot_sizes = groups + (self.num_groups,), slot_sizes + (self.tail,)
        index = torch.tensor(positions, device=trainable.device)
        return GroupAssignment(steps=trainable[:, index], groups=groups, slot_sizes=slot_sizes)
