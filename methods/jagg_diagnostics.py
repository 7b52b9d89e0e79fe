"""JAGG's diagnostic mode (docs/methods/jagg.md#diagnostic-mode): the exact and the JAGG gradient of the same group,
compared.

Users choose ``jagg_frac`` for a new model from the per-group cosine of the two gradients (the paper reports
0.74-0.85 on groups 0-2). The probe isolates one group's contribution to ``.grad`` by stashing the gradient
accumulated so far, letting the group's backward write into empty ``.grad``, and putting the sum back, so the
training gradient is exactly what it would have been without the diagnosis. Works on FSDP2 (DTensor) gradients:
reductions of sharded tensors are summed across ranks.
"""

from __future__ import annotations

from typing import Iterable

import torch


def _full(x: torch.Tensor) -> torch.Tensor:
    """A scalar reduction of a DTensor is a partial sum per rank; ``full_tensor`` all-reduces it."""
    return x.full_tensor() if hasattr(x, "full_tensor") else x


class GradientProbe:
    """Takes ``.grad`` of ``params`` out (leaving None) and puts sums back.

    Args:
        params: the trainable parameters whose gradient the trainer steps on.
    """

    def __init__(self, params: Iterable[torch.nn.Parameter]):
        self.params = [p for p in params if p.requires_grad]

    def take(self) -> list[torch.Tensor | None]:
        grads = [p.grad for p in self.params]
        for p in self.params:
            p.grad = None
        return grads

    def put(self, *parts: list[torch.Tensor | None]) -> None:
        """Set ``.grad`` to the sum of the given gradient lists (None entries count as zero)."""
        for i, p in enumerate(self.params):
            present = [g for part in parts if (g := part[i]) is not None]
            p.grad = None if not present else present[0] if len(present) == 1 else sum(present[1:], present[0])


def _sum_sq(a: list[torch.Tensor | None], b: list[torch.Tensor | None] | None = None, diff: bool = False) -> float:
    """``sum <a, b>`` over parameters, or ``sum |a - b|^2`` with ``diff`` (None counts as zero)."""
    total = 0.0
    for i, x in enumerate(a):
        y = x if b is None else b[i]
        if diff:
            if x is None and y is None:
                continue
            x = torch.zeros_like(y) if x is None else x
            y = torch.zeros_like(x) if y is None else y
            total += float(_full(((x.double() - y.double()) ** 2).sum()))
        elif x is not None and y is not None:
            total += float(_full((x.double() * y.double()).sum()))
    return total


def compare(approx: list[torch.Tensor | None], exact: list[torch.Tensor | None]) -> dict[str, float]:
    """Cosine and relative error ``|approx - exact| / |exact|`` of two gradients (lists over parameters)."""
    aa, ee, ae = _sum_sq(approx), _sum_sq(exact), _sum_sq(approx, exact)
    denom = (aa * ee) ** 0.5
    return {
        "cos": ae / denom if denom > 0 else float("nan"),
        "rel_err": _sum_sq(approx, exact, diff=True) ** 0.5 / ee**0.5 if ee > 0 else float("nan"),
    }
