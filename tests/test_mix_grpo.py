"""method=mix_grpo (docs/methods/mix_grpo.md) against the authors' code: the values in
tests/reference/mixgrpo_values.json were computed by Tencent-Hunyuan/MixGRPO @e5cdd6a427778d8c8b2e7a48ce16972141adbe7c
on the inputs drawn here (tests/reference/make_mixgrpo_values.py regenerates them from a clone): the window schedule
over training iterations, the sigma grid, the SDE / ODE steps and their log-probs, the group advantages, the clipped
loss; MixGRPO-Flash's DPM-Solver++ steps, compressed grids and whole rollouts (run_sample_step on a toy velocity);
then the method's window masks and its resumable state. The training runs on every tiny twin (declared passes) come
from the tests parametrised over every method; chunking, update batches and host syncs from their method lists
(tests/test_chunked_rollout.py, tests/test_update_batch.py, tests/test_update_syncs.py); FSDP and resume below."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from conftest import compose
from dist_utils import run_distributed
from flash_toys import ToyBackbone
from launcher.components import build
from launcher.train.trainer import RunInfo, Trainer
from method_checks import at_iteration, crash_and_resume, metrics_without_time
from methods.advantages import compute_advantages
from methods.dpm_solver import dpm_solver_pp_step
from methods.losses import ppo_clip_loss
from methods.mix_grpo import MixGRPO
from methods.mix_grpo_config import MixGRPOConfig
from methods.mix_grpo_flash import flash_sigmas, post_window_ode
from methods.mix_grpo_flash_config import MixGRPOFlashConfig
from methods.mix_grpo_window import post_window_points, rollout_steps, window_steps
from methods.ode_solvers import make_solver
from methods.schedule import linear_shift_sigmas
from methods.schedule_config import Schedule
from methods.sde import FlowSDEScheduler
from reference.make_mixgrpo_values import (
    COMMIT,
    FLASH_GROUP,
    FLASH_PROMPTS,
    FLASH_SHAPE,
    FLASH_TRAJECTORIES,
    ITERATIONS,
    WINDOWS,
    dpm_step_inputs,
    flash_inputs,
    loss_inputs,
    step_inputs,
    toy_velocity,
)
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
        (["method=mix_grpo", "method.window_size=24"], "method.window_size"),
        (["method=mix_grpo", "method.window_stop=25"], "method.window_stop"),
        (["method=mix_grpo", "method.window_strategy=random"], "method.window_strategy"),
        (["method=mix_grpo", "method.window_shift_every=0"], "method.window_shift_every"),
        (["method=mix_grpo", "method.window_stride=-1"], "method.window_stride"),
        (["method=mix_grpo_flash", "method.post_window_compress=0"], "method.post_window_compress"),
        (["method=mix_grpo_flash", "method.schedule=scheduler"], "method.schedule"),
    ],
)
def test_bad_windows_fail_before_any_model_is_built(overrides, key, no_model_building, tmp_path):
    with pytest.raises(ConfigError) as err:
        Trainer(compose(overrides), RunInfo(run_dir=tmp_path))
    assert key in str(err.value)


# -- MixGRPO-Flash ----------------------------------------------------------------------------------------------------
FLASH = REF["flash"]


def test_flash_preset_is_the_flash_script_and_declares_its_compressed_passes():
    c = MixGRPOFlashConfig()
    assert (c.ode_solver, c.dpm_solver_type, c.post_window_compress, c.window_shift_every) == (
        "dpm_solver_pp2",
        "midpoint",
        0.4,
        20,
    )
    # the first window [0, 3]: steps 0-3, then 7 DPM-Solver++ steps over int(0.4 x 22) = 8 sigmas (25 -> 11)
    assert rollout_steps(c, 0) == 11 and MixGRPO.passes_per_sample(c) == (11 + 4, 4)
    assert MixGRPO.passes_per_sample(MixGRPOConfig()) == (25 + 4, 4)  # Euler after the window: all 25 steps
    assert rollout_steps(c, 250) == 19  # the window [12, 15]: 16 + int(0.4 x 10) - 1


@pytest.mark.parametrize("ratio", [0.4, 0.2])
def test_flash_compressed_grids_equal_the_reference(ratio, float64):
    """Every last window step s of the paper's 25-step grid, both scripts' ratios (_Flash.sh, _Flash*.sh): the sigmas
    run_sample_step samples on and its transformer calls. Where the reference keeps a single sigma after the window
    (int((N - s) ratio) < 2: s >= 21 at 0.4, s >= 16 at 0.2) its rollout ends at sigma_{s+1} > 0, undenoised; ours ends at 0 with one
    more (first-order) step (docs/methods/mix_grpo.md#open-choices)."""
    c = MixGRPOFlashConfig(post_window_compress=ratio)
    sigmas = linear_shift_sigmas(c.sampling_steps, c.shift)
    differs = []
    for last in range(c.sampling_steps - 2):
        theirs = FLASH["schedules"][f"{ratio}/{last}"]
        ours = flash_sigmas(sigmas, last, post_window_points(c, last), c.shift)
        steps = last + post_window_points(c, last)
        assert len(ours) == steps + 1 and ours[-1] == 0.0
        if theirs["sigmas"][-1] != 0.0:
            differs.append(last)
            theirs["sigmas"].append(0.0)
            theirs["calls"] += 1
        assert len(ours) == len(theirs["sigmas"]) and max(abs(a - b) for a, b in zip(ours, theirs["sigmas"])) <= 1e-12
        assert steps == theirs["calls"], last
    assert differs == list(range(21 if ratio == 0.4 else 16, 23))  # (25 - s) ratio < 2


@pytest.mark.parametrize("solver_type", ["midpoint", "heun"])
def test_dpm_solver_pp_steps_equal_the_reference(solver_type, float64):
    """multistep_dpm_solver_second_order_update and dpm_solver_first_order_update (dpmsolver++) at every post-window
    index of the Flash grid whose window ends at step 3, the final step to sigma = 0 included."""
    grid = FLASH["schedules"]["0.4/3"]["sigmas"]
    cases = [c for c in FLASH["steps"] if c["type"] == solver_type]
    assert [c["k"] for c in cases] == list(range(4, len(grid) - 1))
    for case in cases:
        k, s = case["k"], dpm_step_inputs(case["k"])
        around = (grid[k - 1], grid[k], grid[k + 1])
        first = dpm_solver_pp_step(s["x"], s["m0"], None, around, solver_type)
        assert (first - torch.tensor(case["first"])).abs().max() <= 1e-6, k
        if k == len(grid) - 2:  # to sigma = 0: h = inf, the reference's second-order term is inf x 0 (never taken)
            assert not torch.tensor(case["second"]).isfinite().all()
            with pytest.raises(ValueError, match="first order"):
                dpm_solver_pp_step(s["x"], s["m0"], s["m1"], around, solver_type)
            continue
        second = dpm_solver_pp_step(s["x"], s["m0"], s["m1"], around, solver_type)
        assert (second - torch.tensor(case["second"])).abs().max() <= 1e-6, k
        assert (second - first).abs().max() > 1e-3  # the history matters


class ToyVelocityBackbone(ToyBackbone):
    """:func:`toy_velocity` in float64 over FLASH_SHAPE latents, fixed initial latents; counts its evaluations."""

    def __init__(self, base: torch.Tensor):
        super().__init__(dtype=torch.float64)
        self.base, self.calls = base, 0

    @property
    def latent_shape(self):
        return FLASH_SHAPE

    def initial_noise(self, n, generator=None):
        return self.base[:n].clone()

    def velocity(self, latents, sigma, embeds):
        self.calls += latents.shape[0]
        return toy_velocity(latents, sigma.double())


@pytest.mark.parametrize("name", list(FLASH_TRAJECTORIES))
def test_flash_rollout_equals_the_reference_sampler(name, monkeypatch, float64):
    """The method's whole rollout against run_sample_step with the Flash arguments, on the same toy velocity, initial
    latents and SDE draws: the window's states and log-probs, the final latents, the transformer passes."""
    keys, iteration = FLASH_TRAJECTORIES[name]
    theirs = FLASH["trajectories"][name]
    cfg = MixGRPOFlashConfig(**keys, group_size=FLASH_GROUP, prompts_per_step=FLASH_PROMPTS, rollout_chunk=3)
    inputs = flash_inputs(name, cfg.sampling_steps)
    draws = iter(inputs["noise"])
    monkeypatch.setattr("methods.grpo.host_randn", lambda shape, generator, device: next(draws))
    bb = ToyVelocityBackbone(inputs["base"])
    method = MixGRPO(cfg, bb)
    method.iteration.fill_(iteration)
    assert method.window() == theirs["window"]
    rollout = method.rollout([f"p{i}" for i in range(FLASH_PROMPTS)], torch.Generator())
    b = FLASH_PROMPTS * FLASH_GROUP
    assert bb.calls == b * theirs["calls"] == b * rollout_steps(cfg, iteration)
    assert (rollout.decode_latents - torch.tensor(theirs["final"])).abs().max() <= 1e-6
    window, rows = theirs["window"], torch.arange(b)
    states = torch.tensor(theirs["window_states"])
    for j, i in enumerate(range(window[0], window[-1] + 2)):
        assert (rollout.latents[rows, torch.full_like(rows, i)] - states[:, j]).abs().max() <= 1e-6, i
    log_probs = torch.tensor(theirs["window_log_probs"])
    assert (rollout.log_probs[:, window].double() - log_probs).abs().max() <= 1e-6 * log_probs.abs().max()
    assert rollout.log_probs[:, window[-1] + 1 :].isnan().all()  # nothing after the window is an SDE step
    assert rollout.train_steps.tolist() == [window] * b


def test_post_window_ode_is_diffusers_dpm_solver_multistep_scheduler(float64):
    """The same DPM-Solver++ (2M, midpoint, final step first order) as diffusers' scheduler started mid-grid with the
    window's last data prediction as its history; diffusers steps in float32, hence 1e-5."""
    c = MixGRPOFlashConfig()
    last = 3
    grid = flash_sigmas(linear_shift_sigmas(c.sampling_steps, c.shift), last, post_window_points(c, last), c.shift)
    g = torch.Generator().manual_seed(0)
    x = torch.randn((4, *FLASH_SHAPE), generator=g)
    x0_last = torch.randn((4, *FLASH_SHAPE), generator=g)
    bb = ToyVelocityBackbone(x)
    embeds = bb.encode_prompts(["a"] * 4)
    ours, _ = post_window_ode(bb, x, x0_last, grid, last + 1, embeds, lambda s: s, 4, "midpoint")
    solver = make_solver("dpmpp_2m", torch.tensor(grid))
    solver.set_begin_index(last + 1)
    solver.model_outputs[-1], solver.lower_order_nums = x0_last, 1
    y = x.clone()
    for k in range(last + 1, len(grid) - 1):
        y = solver.step(toy_velocity(y, torch.full((4,), grid[k])), solver.timesteps[k], y, return_dict=False)[0]
    torch.testing.assert_close(ours, y.double(), rtol=1e-5, atol=1e-5)
    assert (ours - x).abs().max() > 0.1


# -- FSDP2 and resume (method=mix_grpo_flash: the window's SDE steps, the DPM-Solver++ tail, MixGRPO's update) ---------
#: 10 steps, a window of 2: the tail is a second-order step and the final first-order one
FLASH_SMOKE = ["experiment=smoke", "logger=none", "method=mix_grpo_flash", "method.sampling_steps=10"]


def _flash_method(parallelize=None) -> MixGRPO:
    cfg = compose([*FLASH_SMOKE, "method.window_size=2", "model.finetune=lora", "model.lora_rank=4"])
    torch.manual_seed(0)
    backbone = build(cfg.model, "model", keep_reference=False)
    if parallelize is not None:
        parallelize(backbone)
    return MixGRPO(OmegaConf.to_object(cfg.method), backbone)


def _flashfull_grads(rank: int | None = None, world: int = 1):
    """The gradients of one update over a fixed scored rollout: every sample in one process, or rank ``rank``'s
    half on a 2-rank FSDP2 mesh (every rank samples the same rollout)."""
    shard = None
    if rank is not None:
        from torch.distributed.device_mesh import init_device_mesh

        shard = lambda bb: bb.parallelize(init_device_mesh("cpu", (world,)))  # noqa: E731
    method = _flash_method(shard)
    rollout = method.rollout(["a red square", "a blue circle"], torch.Generator().manual_seed(0))
    rollout.rewards = torch.linspace(0.1, 0.9, len(rollout))
    method.prepare_update(rollout)
    samples = torch.arange(len(rollout)) if rank is None else torch.arange(len(rollout))[rank::world]
    method.backbone.transformer.zero_grad(set_to_none=True)
    method.backward(rollout, samples, len(samples))
    grads = {
        k: (p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad).detach().clone()
        for k, p in method.backbone.transformer.named_parameters()
        if p.grad is not None
    }
    return rollout.decode_latents, grads


def _sharded_flash(rank, world):
    return _flashfull_grads(rank, world)


@pytest.mark.slow
def test_two_sharded_ranks_equal_one_process():
    old_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        final, single = _flashfull_grads()
        ranks = run_distributed(_sharded_flash, 2)
    finally:
        torch.set_num_threads(old_threads)
    assert any(g.abs().max() > 0 for g in single.values())  # LoRA B (A's gradient is 0 while B is)
    for rank_final, grads in ranks:
        torch.testing.assert_close(rank_final, final, rtol=1e-5, atol=1e-6)  # the Flash rollout on the sharded model
        assert grads.keys() == single.keys()
        for k, v in single.items():
            torch.testing.assert_close(grads[k], v, rtol=1e-4, atol=1e-7, msg=k)


@pytest.mark.slow
def test_interrupted_run_resumes_bitwise_with_the_window_where_it_was(tmp_path):
    """The window moves every step (window_shift_every=1), so the compressed grid does too: a resumed run that lost
    the iteration would sample and train other steps."""
    cfg = compose(
        [
            *FLASH_SMOKE,
            "method.window_size=2",
            "method.window_shift_every=1",
            "trainer.steps=4",
            "trainer.ckpt_every=2",
            "model.finetune=lora",
            "model.lora_rank=4",
        ]
    )
    crash_and_resume(cfg, tmp_path, on_resume=at_iteration(2))
    assert [r["mix/window_start"] for r in metrics_without_time(tmp_path / "run")] == [0.0, 1.0, 2.0, 3.0]
