"""method=mix_grpo (docs/methods/mix_grpo.md) against the authors' code: the values in
tests/reference/mixgrpo_values.json were computed by Tencent-Hunyuan/MixGRPO @e5cdd6a427778d8c8b2e7a48ce16972141adbe7c
on the inputs drawn here (tests/reference/make_mixgrpo_values.py regenerates them from a clone): the window schedule
over training iterations, the sigma grid, the SDE / ODE steps and their log-probs, the group advantages, the clipped
loss; then the method's window masks and its resumable state. The training runs on every tiny twin (declared passes),
chunking, update batches, FSDP and resume come from the tests parametrised over every method."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conftest import compose
from launcher.train.trainer import RunInfo, Trainer
from methods.advantages import compute_advantages
from methods.losses import ppo_clip_loss
from methods.mix_grpo import MixGRPO
from methods.mix_grpo_config import MixGRPOConfig
from methods.mix_grpo_window import window_steps
from methods.schedule import linear_shift_sigmas
from methods.schedule_config import Schedule
from methods.sde import FlowSDEScheduler
from reference.make_mixgrpo_values import COMMIT, ITERATIONS, WINDOWS, loss_inputs, step_inputs
from rewardflow.errors import ConfigError

REF = json.loads((Path(__file__).parent / "reference" / "mixgrpo_values.json").read_text())


def test_the_reference_values_are_the_pinned_commits():
    assert REF["commit"] == COMMIT and set(REF["windows"]) == set(WINDOWS)


@pytest.mark.parametrize("name", list(WINDOWS))
def test_window_schedule_equals_the_reference(name):
    c, diverged = MixGRPOConfig(**WINDOWS[name]), 0
    for k in range(ITERATIONS):
        expected = REF["windows"][name][k]
        if not expected:  # the reference's empty window (start == max_timesteps): ours wraps there instead
            diverged += 1
            continue
        if diverged:  # after the reference's empty stretch the two are one shift apart; compare up to it only
            break
        assert window_steps(c, k) == expected, f"{name}: iteration {k}"
    if name == "paper":
        assert window_steps(c, 0) == [0, 1, 2, 3] and window_steps(c, 25) == [1, 2, 3, 4]
        assert window_steps(c, 22 * 25) == [22] and window_steps(c, 23 * 25) == [0, 1, 2, 3]  # wraps, never empty


def test_sigma_grid_equals_the_reference(float64):
    c = MixGRPOConfig()
    assert (linear_shift_sigmas(c.sampling_steps, c.shift) - torch.tensor(REF["sigmas"])).abs().max() <= 1e-12


def test_sde_and_ode_steps_and_log_probs_equal_flow_grpo_step(float64):
    """Each index of the 25-step grid (the last transition's std is 0: no SDE there), float64, within 1e-6."""
    c = MixGRPOConfig()
    sde = FlowSDEScheduler(linear_shift_sigmas(c.sampling_steps, c.shift), c.noise_kernel, c.eta)
    for i, theirs in enumerate(REF["steps"]):
        s = step_inputs(i)
        index = torch.full((s["x"].shape[0],), i)
        out = sde.step(s["x"], s["v"], index, stochastic=True, noise=s["noise"])
        assert (out.prev_sample - torch.tensor(theirs["prev"])).abs().max() <= 1e-6
        assert (out.mean - torch.tensor(theirs["mean"])).abs().max() <= 1e-6
        assert (out.std - theirs["std"]).abs().max() <= 1e-6
        assert (out.log_prob - torch.tensor(theirs["log_prob"])).abs().max() <= 1e-6
        ode = sde.step(s["x"], s["v"], index, stochastic=False, noise=s["noise"])
        assert (ode.prev_sample - torch.tensor(theirs["ode"])).abs().max() <= 1e-6
        # the update's recomputation with a new velocity (grpo_one_step: prev_sample given)
        again, _ = sde.log_prob(out.prev_sample, s["x"], s["v2"], index)
        assert (again - torch.tensor(theirs["log_prob_v2"])).abs().max() <= 1e-6


def test_group_advantages_and_clipped_loss_equal_the_reference(float64):
    c = MixGRPOConfig()
    li = loss_inputs(c)
    keys = [k for k in range(3) for _ in range(c.group_size)]
    ours = compute_advantages(li["rewards"], keys, "group", clip=1e9).values
    assert (ours - torch.tensor(REF["advantages"])).abs().max() <= 1e-6
    clamped = compute_advantages(li["rewards"], keys, "group", clip=c.adv_clip_max).values
    for theirs in REF["losses"]:
        row, t = theirs["row"], theirs["t"]
        new = li["old"][row, t] + torch.tensor([[li["delta"][t]]])
        loss, stats = ppo_clip_loss(new, li["old"][row, t : t + 1], clamped[row : row + 1], c.clip_range)
        norm = 3 * len(li["train_timesteps"])  # GRPO.backward: update_size x T (gradient_accumulation_steps 3)
        assert abs(float(loss.sum() / norm - theirs["policy"])) <= 1e-6
        assert (stats["ratio"].flatten() - torch.tensor(theirs["ratio"])).abs().max() <= 1e-6
        assert float(stats["clipped"].mean()) == theirs["clip_frac"]


def test_method_samples_and_trains_the_iterations_window_and_keeps_it_in_its_state():
    cfg = MixGRPOConfig(sampling_steps=10, window_size=3, window_shift_every=2, schedule=Schedule.linear_shift)
    m = MixGRPO(cfg, None)  # the linear_shift grid needs no model
    assert MixGRPO.trained_per_sample(cfg) == 3 and MixGRPO.passes_per_sample(cfg) == (10 + 3, 3)
    seen = []
    for step in range(16):
        mask = m.stochastic_steps(2, torch.Generator())
        cols = mask[0].nonzero().flatten().tolist()
        assert cols == window_steps(cfg, step) and (mask == mask[0]).all()
        assert m.select_train_steps(mask, None).tolist() == [cols, cols]
        seen.append(cols[0])
        m.end_step(step)
    assert seen == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7]
    assert window_steps(cfg, 14) == [7] and window_steps(cfg, 16) == [0, 1, 2]  # clipped at stop = 8, then wraps
    state = m.state_dict()
    assert int(state["mix_grpo.iteration"]) == 16
    fresh = MixGRPO(cfg, None)
    fresh.state_dict()["mix_grpo.iteration"].copy_(state["mix_grpo.iteration"])  # what resuming does, in place
    assert fresh.window() == m.window()


@pytest.mark.parametrize(
    "overrides,key",
    [
        (["method.window_size=24"], "method.window_size"),
        (["method.window_stop=25"], "method.window_stop"),
        (["method.window_strategy=random"], "method.window_strategy"),
        (["method.window_shift_every=0"], "method.window_shift_every"),
    ],
)
def test_bad_windows_fail_before_any_model_is_built(overrides, key, no_model_building, tmp_path):
    with pytest.raises(ConfigError) as err:
        Trainer(compose(["method=mix_grpo", *overrides]), RunInfo(run_dir=tmp_path))
    assert key in str(err.value)
