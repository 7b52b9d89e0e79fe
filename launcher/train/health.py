"""Whether a step left the model healthy, so that it may be checkpointed (docs/resume.md#broken-steps).

A step is healthy when its update was applied (no non-finite reward, loss or gradient made it skip) and the trainable
weights are finite with a norm below ``trainer.max_weight_growth`` times their norm when this process started. An
absurd learning rate (``optimizer.lr=1e30``) gives finite but exploded weights after one update, every later reward
NaN: before this guard such steps were checkpointed, and pruning then kept only broken checkpoints. Unhealthy steps
count towards ``trainer.max_nonfinite_in_a_row`` and are never checkpointed, so the last good checkpoint survives.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch


def weight_norm(params: list[torch.nn.Parameter]) -> float:
    """The global L2 norm of ``params`` (over all ranks' shards under FSDP2); one host sync."""
    norm = torch.nn.utils.get_total_norm([p.detach() for p in params])
    if hasattr(norm, "full_tensor"):  # DTensor under FSDP2
        norm = norm.full_tensor()
    return float(norm)


class StepHealth:
    """Tracks the weight norm and whether the last step may be checkpointed (the same on every rank)."""

    def __init__(self, params: list[torch.nn.Parameter], max_growth: float):
        self.params, self.max_growth = params, float(max_growth)
        self.start_norm: float | None = None
        self.last_ok = True  # a resumed run's loaded weights come from a healthy checkpoint

    def start(self) -> None:
        """Record the reference norm (after any resume, before the first step)."""
        self.start_norm = weight_norm(self.params)

    def after_step(self, skipped: int, metrics: dict[str, float]) -> str | None:
        """Judge the step just trained; add ``health/weight_norm`` to its ``metrics``; return what went wrong with
        the weights (None if nothing did: a skipped update is reported by the update loop)."""
        norm = weight_norm(self.params)
        metrics["health/weight_norm"] = norm
        problem = None
        if not math.isfinite(norm):
            problem = f"the trainable weights are not finite (norm {norm})"
        elif self.max_growth and self.start_norm and norm > self.max_growth * self.start_norm:
            problem = (
                f"the trainable weights' norm {norm:.3g} is over trainer.max_weight_growth={self.max_growth:g} times "
                f"its start value {self.start_norm:.3g} (the weights exploded)"
            )
        self.last_ok = not skipped and problem is None
        return problem


def aborted(count: int, limit: int, run_dir: Path) -> str:
    """Why the run stops after ``count`` unhealthy steps in a row, and the fix."""
    return (
        f"{count} steps in a row had a NaN/Inf reward, loss or gradient (their updates skipped) or exploded weights "
        f"(trainer.max_nonfinite_in_a_row={limit}; the warnings above say which); none of them was checkpointed. "
        f"Fix: lower optimizer.lr, starting from this run's last good checkpoint in a new run dir "
        f"(trainer.resume_from={run_dir} optimizer.lr=<lower>), keep trainer.max_grad_norm > 0, check the reward on "
        f"the run's sample images ({run_dir / 'samples'})."
    )
