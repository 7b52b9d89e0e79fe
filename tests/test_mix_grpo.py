"""method=mix_grpo (docs/methods/mix_grpo.md) against the authors' code (tests/reference/mixgrpo_reference.py, copied
from Tencent-Hunyuan/MixGRPO @e5cdd6a427778d8c8b2e7a48ce16972141adbe7c): the window schedule over training
iterations, the sigma grid, the SDE / ODE steps and their log-probs, the group advantages, the clipped loss; then the
method's window masks and its resumable state. The training runs on every tiny twin (declared passes), chunking,
update batches, FSDP and resume come from the tests parametrised over every method."""

from __future__ import annotations

import types

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
from reference import mixgrpo_reference as ref
from rewardflow.errors import ConfigError

WINDOWS = {  # name -> our config keys (the paper's, MixGRPO-Flash's interval, and the reference's other schedules)
    "paper": {},
    "flash_interval": {"window_shift_every": 20},
    "no_overlap": {"window_stride": 4},
    "decay": {"window_strategy": "decay", "window_shift_every": 5},
    "exp_decay": {"window_strategy": "exp_decay", "window_shift_every": 5},
    "no_roll_back": {"window_roll_back": False, "window_shift_every": 3},
    "short": {"sampling_steps": 10, "window_size": 3, "window_shift_every": 2, "window_stride": 2},
}


def reference_states(c: MixGRPOConfig) -> ref.GRPOTrainingStates:
    """train_grpo_flux.py's construction of the states from its arguments (max_timesteps = sampling_steps - 2)."""
    return ref.GRPOTrainingStates(
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


@pytest.mark.parametrize("name", list(WINDOWS))
def test_window_schedule_equals_the_reference(name):
    c = MixGRPOConfig(**WINDOWS[name])
    states, diverged = reference_states(c), 0
    for k in range(700):
        expected = states.get_current_timesteps()  # the training loop: read, then update_iteration()
        states.update_iteration()
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
    theirs = ref.sd3_time_shift(c.shift, torch.linspace(1, 0, c.sampling_steps + 1, dtype=torch.float64))
    assert (linear_shift_sigmas(c.sampling_steps, c.shift) - theirs).abs().max() <= 1e-12


@pytest.mark.parametrize("stochastic", [True, False], ids=["sde", "ode"])
def test_sde_and_ode_steps_and_log_probs_equal_flow_grpo_step(stochastic, float64):
    """Each index of the 25-step grid (the last transition's std is 0: no SDE there), float64, within 1e-6."""
    c = MixGRPOConfig()
    sigmas = linear_shift_sigmas(c.sampling_steps, c.shift)
    sde = FlowSDEScheduler(sigmas, c.noise_kernel, c.eta)
    g = torch.Generator().manual_seed(0)
    for i in range(c.sampling_steps - 1):
        x, v, noise = (torch.randn(3, 4, 8, generator=g) for _ in range(3))
        index = torch.full((3,), i)
        out = sde.step(x, v, index, stochastic=stochastic, noise=noise)
        prev_in = out.prev_sample if stochastic else None
        theirs = ref.flow_grpo_step(v, x, c.eta, sigmas, i, prev_in, determistic=not stochastic)
        assert (out.prev_sample - theirs[0]).abs().max() <= 1e-6
        if stochastic:
            assert (out.mean - theirs[3]).abs().max() <= 1e-6 and (out.std - theirs[4]).abs().max() <= 1e-6
            assert (out.log_prob - theirs[2]).abs().max() <= 1e-6
            # the update's recomputation with a new velocity (grpo_one_step: prev_sample given)
            v2 = v + 0.01 * torch.randn(3, 4, 8, generator=g)
            ours, _ = sde.log_prob(out.prev_sample, x, v2, index)
            again = ref.flow_grpo_step(v2, x, c.eta, sigmas, i, out.prev_sample, determistic=False)
            assert (ours - again[2]).abs().max() <= 1e-6


def test_group_advantages_and_clipped_loss_equal_the_reference(float64):
    c = MixGRPOConfig()
    args = types.SimpleNamespace(
        num_generations=c.group_size,
        trimmed_ratio=0.0,
        clip_range=c.clip_range,
        adv_clip_max=c.adv_clip_max,
        gradient_accumulation_steps=3,
        kl_coeff=c.kl_beta,
    )
    g = torch.Generator().manual_seed(1)
    rewards = torch.rand(3 * c.group_size, generator=g)
    rewards[:4] += 40.0  # some advantages beyond +-5 (the clamp)
    keys = [k for k in range(3) for _ in range(c.group_size)]
    theirs = ref.reference_group_advantages({"rewards": rewards.clone()}, args)
    ours = compute_advantages(rewards, keys, "group", clip=1e9).values
    assert (ours - theirs).abs().max() <= 1e-6
    clamped = compute_advantages(rewards, keys, "group", clip=c.adv_clip_max).values

    old = 0.01 * torch.randn(rewards.shape[0], 5, generator=g)
    train_timesteps = [1, 2, 3, 4]
    for row in range(rewards.shape[0]):
        for t in train_timesteps:
            new = old[row, t] + torch.tensor([[-3e-4, -5e-5, 0.0, 5e-5, 3e-4][t]])
            sample = {"advantages": theirs[row : row + 1], "log_probs": old[row : row + 1]}
            policy, _, _, ratio, clip_frac = ref.reference_policy_loss(args, sample, new, t, train_timesteps)
            loss, stats = ppo_clip_loss(new, old[row, t : t + 1], clamped[row : row + 1], c.clip_range)
            norm = args.gradient_accumulation_steps * len(train_timesteps)  # GRPO.backward: update_size x T
            assert abs(float(loss.sum() / norm - policy)) <= 1e-6
            assert (stats["ratio"] - ratio).abs().max() <= 1e-6
            assert float(stats["clipped"].mean()) == float(clip_frac)


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
