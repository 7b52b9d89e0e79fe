"""MixGRPO's sliding window of SDE (= trained) steps over training iterations, torch-free (the config check reads it).

A port of ``GRPOTrainingStates`` (Tencent-Hunyuan/MixGRPO @e5cdd6a, fastvideo/utils/grpo_states.py): the window
``[start, min(start + size, stop))`` is what iteration ``k`` trains, read before the state machine advances, as
fastvideo/train_grpo_flux.py does (``get_current_timesteps()`` then ``update_iteration()``). The window is a pure
function of the iteration here, replayed from 0, so a resumed run needs only the iteration (docs/methods/mix_grpo.md).

MixGRPO-Flash's step count after the window is here too (:func:`rollout_steps`): ``passes_per_sample`` reads it
without torch.
"""

from __future__ import annotations

import math
from typing import Any

STRATEGIES = ("progressive", "decay", "exp_decay")


def _iters_in_group(m: Any, start: int, stop: int) -> int:
    """How many iterations the window stays at ``start`` (``iters_per_group`` and its decay variants)."""
    every = int(m.window_shift_every)
    if m.window_strategy == "decay":  # get_dynamic_iters_per_group: linear from max to min over the starts
        hi, lo = int(m.window_decay_max), int(m.window_decay_min)
        progress = start / stop
        return max(lo, int(hi * (1 - progress) + lo * progress))
    if m.window_strategy == "exp_decay":  # get_exp_decay_iters_per_group: ceil(every exp(-k ReLU(start - thre)))
        relu = max(0, start - int(m.window_exp_threshold))
        return int(math.ceil(every * math.exp(-float(m.window_exp_k) * relu)))
    return every


def window_stop(m: Any) -> int:
    """The exclusive upper bound of the trained steps and the wrap point (the reference's ``max_timesteps``,
    ``sampling_steps - 2`` unless ``method.window_stop`` is set)."""
    return int(m.sampling_steps) - 2 if m.window_stop is None else int(m.window_stop)


def window_start(m: Any, iteration: int) -> int:
    """The window's first step at training iteration ``iteration`` (0-based)."""
    stop, stride = window_stop(m), int(m.window_stride)
    start, in_group = 0, 0
    for _ in range(int(iteration)):  # update_iteration(), once per finished iteration
        in_group += 1
        if in_group >= _iters_in_group(m, start, stop):
            in_group = 0
            start += stride
        # the reference wraps when start > max_timesteps; at start == max_timesteps its window is empty (its loop
        # then has no loss and fails), so the empty window wraps here too (docs/methods/mix_grpo.md#open-choices)
        if start >= stop:
            if bool(m.window_roll_back):
                start, in_group = 0, 0
            else:  # the reference clips to max_timesteps (an empty window): here the last non-empty one
                start = stop - 1
    return start


def window_steps(m: Any, iteration: int) -> list[int]:
    """The steps SDE-sampled and trained at ``iteration``: ``range(start, min(start + size, stop))``."""
    start = window_start(m, iteration)
    return list(range(start, min(start + int(m.window_size), window_stop(m))))


def post_window_points(m: Any, last: int) -> int:
    """How many sigmas MixGRPO-Flash's compressed grid has from ``sigma_{last + 1}`` to 0 (the last SDE step is
    ``last``): the reference's ``int(max((N - last) x post_window_compress, 1))`` (sampling_utils.py
    ``run_sample_step``), but at least 2 so that the grid ends at 0 (docs/methods/mix_grpo.md#open-choices)."""
    return max(int(max((int(m.sampling_steps) - last) * float(m.post_window_compress), 1)), 2)


def rollout_steps(m: Any, iteration: int) -> int:
    """Transformer evaluations per sample of iteration ``iteration``'s rollout: N with Euler after the window;
    with ``ode_solver=dpm_solver_pp2`` the steps up to the window's last one, then the compressed grid's."""
    if str(m.ode_solver) == "euler":
        return int(m.sampling_steps)
    last = window_steps(m, iteration)[-1]
    return last + post_window_points(m, last)
