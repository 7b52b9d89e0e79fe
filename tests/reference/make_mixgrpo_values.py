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
                fastvideo/utils/sampling_utils.py, the whole module, for MixGRPO-Flash (run_sample_step with the
                _Flash.sh arguments, dpm_solver_first_order_update, multistep_dpm_solver_second_order_update): run
                on a toy velocity, with its ``torch.float32`` read as float64 (the sampler upcasts latents to
                float32; the values are stored in float64, its arithmetic otherwise unchanged) and its
                ``randn_tensor`` handing out fixed draws (the SDE noise our rollout is given in the test)

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
from methods.mix_grpo_flash_config import MixGRPOFlashConfig  # noqa: E402 (MixGRPO-Flash's)
from methods.mix_grpo_window import window_steps  # noqa: E402 (which window a trajectory case samples)

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
    "frozen": {"window_stride": 0, "window_shift_every": 20},  # _Flash*.sh: prog_overlap_step 0
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
    return types.SimpleNamespace(**scope, git_dir=git_dir)


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
    out["flash"] = flash_values(load_flash_reference(ref.git_dir))
    return out


# -- MixGRPO-Flash (sampling_utils.py run_sample_step with dpm_apply_strategy="post") ---------------------------------
FLASH_SHAPE = (2, 2, 2)  # one sample's latent
FLASH_PROMPTS, FLASH_GROUP = 2, 2
#: name -> (our config keys, training iteration): the Flash script's window at its start and later, heun, Flash*
FLASH_TRAJECTORIES = {
    "flash_start": ({}, 0),
    "flash_late_heun": ({"dpm_solver_type": "heun"}, 250),
    "flash_star": ({"window_stride": 0, "post_window_compress": 0.2}, 90),
}


def toy_velocity(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """An element-wise, time-dependent velocity (``t`` the model's time per sample, broadcast over the latent)."""
    t = t.reshape(-1, *([1] * (x.dim() - 1))).to(x.dtype)
    return -x * (0.5 + t) + 0.3 * torch.sin(3.0 * x) + t


def flash_inputs(name: str, steps: int) -> dict[str, torch.Tensor]:
    """A trajectory case's initial latents (one per prompt, repeated over its group) and one float32 standard normal
    draw per SDE-sampler step (what the rollout's generator would give)."""
    g = torch.Generator().manual_seed(7 + sorted(FLASH_TRAJECTORIES).index(name))
    base = torch.randn((FLASH_PROMPTS, *FLASH_SHAPE), generator=g, dtype=torch.float32).double()
    shape = (FLASH_PROMPTS * FLASH_GROUP, *FLASH_SHAPE)
    noise = [torch.randn(shape, generator=g, dtype=torch.float32).double() for _ in range(steps)]
    return {"base": base, "noise": torch.stack(noise)}


def dpm_step_inputs(k: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(300 + k)
    x, m0, m1 = (torch.randn(SHAPE, generator=g, dtype=torch.float64) for _ in range(3))
    return {"x": x, "m0": m0, "m1": m0 + 0.1 * m1}


class _Float64Torch(types.ModuleType):
    """torch with ``float32`` read as float64 (see the module docstring)."""

    float32 = torch.float64

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)


def load_flash_reference(git_dir: str) -> dict[str, Any]:
    """The namespace of fastvideo/utils/sampling_utils.py (the whole module run as it is), then its ``torch`` and
    ``randn_tensor`` replaced (looked up at call time)."""
    text = subprocess.run(
        ["git", "--git-dir", git_dir, "show", f"{COMMIT}:fastvideo/utils/sampling_utils.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    module = types.ModuleType("mixgrpo_sampling_utils")  # a module of its own: its dataclass looks itself up
    sys.modules[module.__name__] = module
    exec(compile(text, "sampling_utils.py", "exec"), module.__dict__)
    module.__dict__["torch"] = _Float64Torch("torch")
    return module.__dict__


class _Toy:
    """The transformer run_sample_step calls: ``toy_velocity`` of its latents and time; counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def eval(self) -> None:
        pass

    def __call__(self, hidden_states, timestep, **_: Any) -> tuple[torch.Tensor]:
        self.calls += 1
        return (toy_velocity(hidden_states, timestep),)


def run_reference_sampler(
    ref: dict[str, Any], c: MixGRPOFlashConfig, window: list[int], z: torch.Tensor, noise: torch.Tensor
):
    """run_sample_step with the Flash script's arguments for config ``c``, SDE steps ``window``, initial latents ``z``;
    returns its outputs, the sigma schedule it sampled on (recorded from its flow_grpo_step calls) and its
    transformer calls."""
    draws = iter(noise)
    ref["randn_tensor"] = lambda shape, generator=None, device=None, dtype=None: next(draws).to(dtype)
    seen: list[torch.Tensor] = []
    flow_grpo_step = ref["flow_grpo_step"]

    def recording(*a: Any, **k: Any) -> Any:
        seen.append(k["sigmas"])
        return flow_grpo_step(*a, **k)

    ref["flow_grpo_step"] = recording
    args = types.SimpleNamespace(
        dpm_algorithm_type="dpmsolver++", dpm_apply_strategy="post", sample_strategy="progressive",
        dpm_post_compress_ratio=c.post_window_compress, dpm_solver_order=2, dpm_solver_type=str(c.dpm_solver_type),
        shift=c.shift, flow_grpo_sampling=True, eta=c.eta, drop_last_sample=False,
    )  # fmt: skip
    determistic = [i not in window for i in range(c.sampling_steps)]
    sigmas = ref["sd3_time_shift"](c.shift, torch.linspace(1, 0, c.sampling_steps + 1))
    toy, b = _Toy(), z.shape[0]
    try:
        z_out, _, all_latents, all_log_probs = ref["run_sample_step"](
            args, z, range(c.sampling_steps), sigmas, toy, torch.zeros(b, 1, 4), torch.zeros(b, 4),
            torch.zeros(1, 3), torch.zeros(1, 3), True, determistic,
        )  # fmt: skip
    finally:
        ref["flow_grpo_step"] = flow_grpo_step
    return z_out, all_latents, all_log_probs, seen[0], toy.calls


def flash_values(ref: dict[str, Any]) -> dict[str, Any]:
    c = MixGRPOFlashConfig()
    out: dict[str, Any] = {"schedules": {}, "steps": [], "trajectories": {}}
    # the compressed grid for every last window step and both scripts' ratios (one SDE step suffices: the grid
    # depends on the last one only)
    for ratio in (0.4, 0.2):
        cr = MixGRPOFlashConfig(post_window_compress=ratio)
        for last in range(c.sampling_steps - 2):
            z = torch.zeros((1, *SHAPE[1:]))
            _, _, _, grid, calls = run_reference_sampler(ref, cr, [last], z, torch.zeros(c.sampling_steps, *z.shape))
            out["schedules"][f"{ratio}/{last}"] = {"sigmas": grid.tolist(), "calls": calls}
    # single steps on the paper's grid with the window ending at step 3: every post-window step, both solver types
    grid = torch.tensor(out["schedules"]["0.4/3"]["sigmas"])
    for solver_type in ("midpoint", "heun"):
        args = types.SimpleNamespace(dpm_algorithm_type="dpmsolver++", dpm_solver_type=solver_type)
        for k in range(4, grid.numel() - 1):
            s = dpm_step_inputs(k)
            second = ref["multistep_dpm_solver_second_order_update"](args, [s["m1"], s["m0"]], grid, k, s["x"])[0]
            first = ref["dpm_solver_first_order_update"](args, s["m0"], grid, k, s["x"])[0]
            out["steps"].append({"type": solver_type, "k": k, "second": second.tolist(), "first": first.tolist()})
    # whole rollouts: the authors' sampler on the toy velocity
    for name, (keys, iteration) in FLASH_TRAJECTORIES.items():
        cn = MixGRPOFlashConfig(**keys)
        window = window_steps(cn, iteration)
        inputs = flash_inputs(name, cn.sampling_steps)
        z = inputs["base"].repeat_interleave(FLASH_GROUP, 0)
        z_out, all_latents, all_log_probs, grid, calls = run_reference_sampler(ref, cn, window, z, inputs["noise"])
        out["trajectories"][name] = {
            "window": window, "sigmas": grid.tolist(), "calls": calls, "final": z_out.tolist(),
            "window_states": all_latents[:, window[0] : window[-1] + 2].tolist(),
            "window_log_probs": all_log_probs[:, window].tolist(),
        }  # fmt: skip
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    OUT.write_text(json.dumps(values(load_reference(sys.argv[1]))) + "\n")
    print(f"wrote {OUT}")
