"""Estimates of the pretrained data score ``grad log p_pre(X_1)`` at the data end
(docs/methods/eam.md#the-pretrained-score-at-the-data-end).

EAM's corrected terminal cost needs the pretrained score at ``t = 1``, where the flow-matching score formula
``(t v - x) / (1 - t)`` is 0/0. Estimators, all from one forward pass of the frozen model ``v_pre`` (AM time):

* ``tweedie_shrink`` (default, our reconstruction): with ``t' = 1 - delta``, evaluate the frozen model at the shrunk,
  noise-free point ``t' X_1``: ``s_hat = t'^2 / delta * (v_pre(t' X_1, t') - X_1)``. This is *exactly* the score of
  ``p_pre * N(0, tau^2 I)`` with ``tau = delta / (1 - delta)`` (Tweedie), so the fine-tuning target becomes the
  tilt of that slightly smoothed law, which tends to the true target as ``delta -> 0``.
* ``tweedie_naive`` (ablation only): ``s_pre(X_1, t') = (t' v_pre(X_1, t') - X_1) / delta`` at
  the *unshrunk* point; biased by the shrink (about ``-X_1 / delta`` for point-mass data). Never a default.

(The anchor ablation, a pretrained anchor at ``X_t`` instead of a terminal score, changes the regression target, so it
lives in :mod:`methods.eam` as ``method.terminal_score=anchor``.)
"""

from __future__ import annotations

from typing import Callable

import torch

from methods.eam_config import TerminalScore

#: ``velocity_pre(x, t) -> v_AM`` of the frozen pretrained model, for per-sample AM times ``t`` (B,)
VelocityFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

TERMINAL_SCORE_ESTIMATORS = (TerminalScore.tweedie_shrink, TerminalScore.tweedie_naive)


def smoothing_std(delta: float) -> float:
    """``tau = delta / (1 - delta)``: the Gaussian smoothing that ``tweedie_shrink`` puts on ``p_pre``."""
    return delta / (1.0 - delta)


def tweedie_shrink_score(velocity_pre: VelocityFn, x1: torch.Tensor, delta: float) -> torch.Tensor:
    """``t'^2 / delta * (v_pre(t' x_1, t') - x_1)`` with ``t' = 1 - delta`` = score of ``p_pre * N(0, tau^2)``."""
    tp = 1.0 - delta
    t = torch.full((x1.shape[0],), tp, dtype=torch.float64, device=x1.device)
    v = velocity_pre(tp * x1, t)
    return (tp**2 / delta) * (v - x1)


def tweedie_naive_score(velocity_pre: VelocityFn, x1: torch.Tensor, delta: float) -> torch.Tensor:
    """``(t' v_pre(x_1, t') - x_1) / delta``: the score of ``p_{t'}`` at the clean point (biased; ablation only)."""
    tp = 1.0 - delta
    t = torch.full((x1.shape[0],), tp, dtype=torch.float64, device=x1.device)
    v = velocity_pre(x1, t)
    return (tp * v - x1) / delta


def terminal_score(kind: str, velocity_pre: VelocityFn, x1: torch.Tensor, delta: float) -> torch.Tensor:
    if kind == "tweedie_shrink":
        return tweedie_shrink_score(velocity_pre, x1, delta)
    if kind == "tweedie_naive":
        return tweedie_naive_score(velocity_pre, x1, delta)
    raise ValueError(
        f"unknown terminal score estimator {kind!r}; expected one of {', '.join(TERMINAL_SCORE_ESTIMATORS)}"
    )
