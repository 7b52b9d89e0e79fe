"""How many transitions per sample each GRPO baseline trains (docs/methods/grpo_baselines.md#trained-steps), and what
JAGG trains over each baseline (docs/methods/jagg.md#which-steps-are-trained-per-baseline).

Plain functions of config values, without torch: the method classes train by them (``trained_per_sample``), and the
config checks (methods/jagg_config.py) read them before torch is imported, so a misfit ``method.window`` is reported
in about a second (docs/configuration.md#validation). Written once here, so the check and the training agree.
"""

from __future__ import annotations

from typing import Any


def dance_trained(timestep_fraction: float, sampling_steps: int) -> int:
    """DanceGRPO: a random floor(timestep_fraction (N - 1)) of the N - 1 trainable transitions."""
    return max(1, int(timestep_fraction * (sampling_steps - 1)))


def flow_trained(timestep_fraction: float, sampling_steps: int) -> int:
    """Flow-GRPO: transitions 0..T-1 with T = floor(timestep_fraction N), at most N - 1."""
    n = sampling_steps
    return max(1, min(n - 1, int(timestep_fraction * n)))


def fast_trained(window_size: int, sampling_steps: int) -> int:
    """Flow-GRPO-Fast: its SDE window; size 0 is the window (0, N-1)."""
    return int(window_size) or int(sampling_steps) - 1


def jagg_trainable(m: Any, sampling_steps: int | None = None) -> int:
    """M: how many steps per sample JAGG over ``m.base`` trains (with ``sampling_steps`` if given). Over DanceGRPO
    all N - 1 trainable steps (its random subsets cannot form groups of consecutive steps); otherwise the baseline's
    own rule."""
    n = int(sampling_steps or m.sampling_steps)
    if m.base == "dance_grpo":
        return n - 1
    if m.base == "flow_grpo":
        return flow_trained(m.timestep_fraction, n)
    return fast_trained(m.window_size, n)


def jagg_trained_rule(m: Any) -> str:
    """The rule of :func:`jagg_trainable` in words, for the messages of ``method.window``."""
    steps = jagg_trainable(m)
    if m.base == "dance_grpo":
        return f"method.base=dance_grpo trains sampling_steps - 1 = {steps} steps"
    if m.base == "flow_grpo":
        return (
            f"method.base=flow_grpo trains floor(timestep_fraction x sampling_steps), at most sampling_steps - 1,"
            f" = {steps} steps"
        )
    return f"method.base=flow_grpo_fast trains its SDE window of method.window_size = {steps} steps"


def jagg_fix_hint(m: Any, w: int) -> str:
    """Which ``sampling_steps`` near the current one give a trainable count that fits ``w`` (over Flow-GRPO-Fast
    with a set window: the window size that does)."""
    if m.base == "flow_grpo_fast" and int(m.window_size) != 0:
        return f"method.window_size={w * max(1, -(-int(m.window_size) // w))} (window_range must fit it)"
    n = int(m.sampling_steps)
    fits = [
        k
        for k in range(max(2, n - 3 * w), n + 3 * w + 1)
        if jagg_trainable(m, k) >= w and jagg_trainable(m, k) % w == 0
    ]
    if not fits:
        return "change the steps the baseline trains"
    below, above = [k for k in fits if k <= n], [k for k in fits if k > n]
    picks = ([below[-1]] if below else []) + ([above[0]] if above else [])
    return " or ".join(f"method.sampling_steps={k} ({jagg_trainable(m, k)} steps)" for k in picks)
