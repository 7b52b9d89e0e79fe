"""Writes tests/reference/mixgrpo_values.json: MixGRPO's window schedule, sigma grid, SDE / ODE steps with their
log-probs, group advantages and clipped loss, computed by the authors' code on fixed float64 inputs. The authors' code
is read from a local clone at the pinned commit and run as it is (nothing of it is copied here):

    repository  Tencent-Hunyuan/MixGRPO (License Terms of MixGRPO, Copyright (C) 2025 Tencent)
    commit      e5cdd6a427778d8c8b2e7a48ce16972141adbe7c
    files       fastvideo/utils/grpo_states.py (GRPOTrainingStates, the whole module)
                fastvideo/utils/sampling_utils.py (sd3_time_shift, flow_grpo_step)
                fastvideo/train_grpo_flux.py (lines 459-479: the reward_aggr group advantages; lines 547-548 and
                567-584: the clipped policy loss, statements of train_one_step run inside a function whose
                arguments name the variables they read)

Usage: python tests/reference/make_mixgrpo_values.py /path/to/MixGRPO/.git   (tests/test_mix_grpo.py reads the JSON;
its inputs are drawn from the same seeds as here)
"""

from __future__ import annotations

import ast
import json
import math
import random
import subprocess
import sys
import textwrap
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from methods.mix_grpo_config import MixGRPOConfig  # noqa: E402 (the configs the schedules are drawn for)

REPO = "Tencent-Hunyuan/MixGRPO"
COMMIT = "e5cdd6a427778d8c8b2e7a48ce16972141adbe7c"
OUT = Path(__file__).with_name("mixgrpo_values.json")

#: name -> our config keys (the paper's, MixGRPO-Flash's interval, and the reference's other schedules)
WINDOWS = {
    "paper": {},
    "flash_interval": {"window_shift_every": 20},
    "no_overlap": {"window_stride": 4},
    "decay": {"window_strategy": "decay", "window_shift_every": 5},
    "exp_decay": {"window_strategy": "exp_decay", "window_shift_every": 5},
    "no_roll_back": {"window_roll_back": False, "window_shift_every": 3},
    "short": {"sampling_steps": 10, "window_size": 3, "window_shift_every": 2, "window_stride": 2},
}
ITERATIONS = 700
SHAPE = (2, 4, 2)  # one step's latents: 2 samples


def step_inputs(i: int) -> dict[str, torch.Tensor]:
    """Step ``i``'s latents, velocity, noise and second velocity (the update's), float64, from fixed seeds."""
    g = torch.Generator().manual_seed(100 + i)
    x, v, noise = (torch.randn(SHAPE, generator=g, dtype=torch.float64) for _ in range(3))
    return {"x": x, "v": v, "noise": noise, "v2": v + 0.01 * torch.randn(SHAPE, generator=g, dtype=torch.float64)}


def loss_inputs(c: MixGRPOConfig) -> dict[str, Any]:
    g = torch.Generator().manual_seed(1)
    rewards = torch.rand(3 * c.group_size, generator=g, dtype=torch.float64)
    rewards[:4] += 40.0  # some advantages beyond +-5 (the clamp)
    old = 0.01 * torch.randn(rewards.shape[0], 5, generator=g, dtype=torch.float64)
    return {"rewards": rewards, "old": old, "train_timesteps": [1, 2, 3, 4], "delta": [-3e-4, -5e-5, 0.0, 5e-5, 3e-4]}


def reference_states_args(c: MixGRPOConfig) -> dict[str, Any]:
    """train_grpo_flux.py's construction of the states from its arguments (max_timesteps = sampling_steps - 2)."""
    return dict(
        iters_per_group=c.window_shift_every,
        group_size=c.window_size,
        max_timesteps=c.sampling_steps - 2,
        cur_timestep=0,
        cur_iter_in_group=0,
        sample_strategy=c.window_strategy,
        prog_overlap=True,
        prog_overlap_step=c.window_stride,
        max_iters_per_group=c.window_decay_max,
        min_iters_per_group=c.window_decay_min,
        roll_back=c.window_roll_back,
    )


def load_reference(git_dir: str) -> types.SimpleNamespace:
    def show(path: str) -> str:
        return subprocess.run(
            ["git", "--git-dir", git_dir, "show", f"{COMMIT}:{path}"], check=True, capture_output=True, text=True
        ).stdout

    def randn_tensor(shape, generator=None, device=None, dtype=None):  # diffusers' on the CPU
        return torch.randn(shape, generator=generator, device=device, dtype=dtype)

    scope: dict[str, Any] = {
        "torch": torch, "math": math, "np": np, "random": random, "dataclass": dataclass, "List": list,
        "Optional": Optional, "randn_tensor": randn_tensor,
    }  # fmt: skip
    exec(compile(show("fastvideo/utils/grpo_states.py"), "grpo_states.py", "exec"), scope)
    sampling = show("fastvideo/utils/sampling_utils.py")
    for node in ast.parse(sampling).body:
        if isinstance(node, ast.FunctionDef) and node.name in ("sd3_time_shift", "flow_grpo_step"):
            exec(compile(ast.get_source_segment(sampling, node) or "", "sampling_utils.py", "exec"), scope)
    train = show("fastvideo/train_grpo_flux.py").splitlines()

    def body(*ranges: tuple[int, int]) -> str:
        text = "\n".join(line for a, b in ranges for line in train[a - 1 : b])
        return textwrap.indent(textwrap.dedent(text), "    ")

    exec(
        "def group_advantages(samples, args):\n" + body((459, 479)) + "\n    return samples['advantages']\n"
        "def policy_loss(args, sample, new_log_probs, _, train_timesteps):\n"
        + body((547, 548), (567, 584))
        + "\n    return policy_loss, kl_loss, loss, ratio, clip_frac\n",
        scope,
    )
    return types.SimpleNamespace(**scope)


def values(ref: types.SimpleNamespace) -> dict[str, Any]:
    torch.set_default_dtype(torch.float64)
    out: dict[str, Any] = {"repository": REPO, "commit": COMMIT, "windows": {}}
    for name, keys in WINDOWS.items():
        states = ref.GRPOTrainingStates(**reference_states_args(MixGRPOConfig(**keys)))
        schedule = []
        for _ in range(ITERATIONS):  # the training loop: read, then update_iteration()
            schedule.append(list(states.get_current_timesteps()))
            states.update_iteration()
        out["windows"][name] = schedule
    c = MixGRPOConfig()
    out["sigmas"] = ref.sd3_time_shift(c.shift, torch.linspace(1, 0, c.sampling_steps + 1)).tolist()
    sigmas = torch.tensor(out["sigmas"])
    steps = []
    for i in range(c.sampling_steps - 1):  # the last transition's std is 0: no SDE there
        s = step_inputs(i)
        # the mean and std (any given sample: they do not depend on it), then the SDE sample with the fixed noise
        # (what randn_tensor's draw would give), then its log-prob
        _, _, _, mean, std = ref.flow_grpo_step(s["v"], s["x"], c.eta, sigmas, i, s["x"], determistic=False)
        prev = mean + std * s["noise"]
        _, _, log_prob, mean, std = ref.flow_grpo_step(s["v"], s["x"], c.eta, sigmas, i, prev, determistic=False)
        ode = ref.flow_grpo_step(s["v"], s["x"], c.eta, sigmas, i, None, determistic=True)[0]
        again = ref.flow_grpo_step(s["v2"], s["x"], c.eta, sigmas, i, prev, determistic=False)[2]
        steps.append(
            {"prev": prev.tolist(), "mean": mean.tolist(), "std": float(std), "log_prob": log_prob.tolist(),
             "ode": ode.tolist(), "log_prob_v2": again.tolist()}
        )  # fmt: skip
    out["steps"] = steps
    li = loss_inputs(c)
    args = types.SimpleNamespace(
        num_generations=c.group_size, trimmed_ratio=0.0, clip_range=c.clip_range, adv_clip_max=c.adv_clip_max,
        gradient_accumulation_steps=3, kl_coeff=c.kl_beta, multi_reward_mix="reward_aggr",
    )  # fmt: skip
    advantages = ref.group_advantages({"rewards": li["rewards"].clone()}, args)
    out["advantages"] = advantages.tolist()
    losses = []
    for row in range(li["rewards"].shape[0]):
        for t in li["train_timesteps"]:
            new = li["old"][row, t] + torch.tensor([[li["delta"][t]]])
            sample = {"advantages": advantages[row : row + 1], "log_probs": li["old"][row : row + 1]}
            policy, _, _, ratio, clip_frac = ref.policy_loss(args, sample, new, t, li["train_timesteps"])
            losses.append({"row": row, "t": t, "policy": float(policy), "ratio": ratio.flatten().tolist(),
                           "clip_frac": float(clip_frac)})  # fmt: skip
    out["losses"] = losses
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    OUT.write_text(json.dumps(values(load_reference(sys.argv[1]))) + "\n")
    print(f"wrote {OUT}")
