"""method=awm (docs/methods/awm.md): the trained times, the noising, the log-likelihood surrogate, the loss and its
gradient equal the authors' code on fixed float64 inputs (tests/reference/awm_values.json, made by
tests/reference/make_awm_values.py from scxue/advantage_weighted_matching @be51372); the update's wiring against an
independent recomputation, the sampling policy, the declared passes, config errors, two FSDP2 ranks equal one
process, resume is bitwise."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from conftest import compose
from dist_utils import run_distributed
from launcher.components import build
from launcher.train.trainer import RunInfo, Trainer
from launcher.validate import validate
from method_checks import crash_and_resume, full_grads, shard
from methods.awm import AWM
from methods.awm_loss import awm_loss, kl_term, matching_log_prob, scaled_advantages
from methods.awm_times import stratified_steps
from methods.diffusion_nft import noised_latents
from rewardflow.errors import ConfigError
from test_diffusion_nft import _lag

SMOKE = ["experiment=smoke", "logger=none", "method=awm"]
#: their option strings -> ours (methods/awm_config.py)
THEIRS = {"Uniform": "uniform", "t**2": "t2", "ELBO": "elbo"}
VALUES = json.loads((Path(__file__).parent / "reference" / "awm_values.json").read_text())


# ------------------------------------------------------------------------------------ equal to the authors' code
@pytest.mark.parametrize("case", VALUES["cases"], ids=lambda c: c["name"])
def test_times_noising_loss_and_gradient_equal_the_reference_code(case, float64):
    assert VALUES["reference"]["commit"] == "be5137232e33a21b449ed65a533211d0deb97ed8"
    c, x, times, want = case["config"], case["inputs"], case["times"], case["expected"]
    c = {k: THEIRS.get(v, v) if isinstance(v, str) else v for k, v in c.items()}
    t, b = c["T"], c["B"]
    tol = dict(rtol=0, atol=1e-6)

    # trained times: their stratified indices from the same uniforms, and the grid's sigma of each row
    steps = stratified_steps(torch.tensor(times["u"], dtype=torch.float32), 14, 0.9, c["time_type"])
    if c["time_type"] == "discrete_with_init":  # T - 1 draws: our T-column input's last column is unused
        steps = stratified_steps(torch.tensor([*times["u"], 0.0], dtype=torch.float32), 14, 0.9, c["time_type"])
    assert steps.tolist() == times["t_indices"]
    grid = torch.tensor(times["grid_timesteps"], dtype=torch.float32) / 1000  # the scheduler's sigmas
    sigma = grid[steps].repeat_interleave(b).double()  # rows time-major: row j B + i is sample i at time j
    assert torch.equal(sigma, torch.tensor(times["sigma"]))

    # the forward process on their noise
    x0 = torch.tensor(x["x0"]).repeat(t, 1, 1, 1)
    noise = torch.tensor(case["noise"])
    torch.testing.assert_close(noised_latents(x0, noise, sigma), torch.tensor(want["noised_latents"]), **tol)

    # the surrogate, the advantages, the loss and its gradient
    v = torch.tensor(x["v"], requires_grad=True)
    v_ref, v_ema = torch.tensor(x["v_ref"]), torch.tensor(x["v_ema"])
    log_prob = matching_log_prob(v, noise, x0, sigma, c["weighting"], c["ghuber_power"])
    torch.testing.assert_close(log_prob, torch.tensor(want["log_prob"]), **tol)
    if c["off_policy"]:
        old = matching_log_prob(v_ema, noise, x0, sigma, c["weighting"], c["ghuber_power"])
    else:
        old = log_prob.detach()
    torch.testing.assert_close(old, torch.tensor(want["old_log_prob"]), **tol)
    adv = scaled_advantages(torch.tensor(x["advantages"]), 5.0, 1.0).repeat(t)
    loss, stats = awm_loss(
        log_prob,
        old,
        adv,
        c["clip_range"],
        kl_term(v, v_ref, sigma, c["kl_weight"]),
        c["beta"],
        kl_term(v, v_ema, sigma, c["kl_ema_weight"]),
        c["ema_beta"],
    )
    total = loss.mean()  # their loss: the mean over the batch's rows
    (grad,) = torch.autograd.grad(total, v)
    torch.testing.assert_close(total, torch.tensor(want["loss"]), **tol)
    torch.testing.assert_close(stats["policy_loss"].mean(), torch.tensor(want["policy_loss"]), **tol)
    torch.testing.assert_close(stats["kl_ref"].mean(), torch.tensor(want["kl_loss"]), **tol)
    torch.testing.assert_close(stats["kl_ema"].mean(), torch.tensor(want["ema_kl_loss"]), **tol)
    torch.testing.assert_close(stats["clipped"].mean(), torch.tensor(want["clipfrac"]), **tol)
    torch.testing.assert_close(grad, torch.tensor(want["grad_v"]), **tol)


def test_the_reference_cases_cover_every_option():
    seen = {k: {c["config"][k] for c in VALUES["cases"]} for k in ("time_type", "weighting", "kl_weight")}
    assert seen == {
        "time_type": {"discrete", "discrete_wo_init", "discrete_with_init"},
        "weighting": {"Uniform", "t", "t**2", "huber", "ghuber"},  # theirs: every one of ours
        "kl_weight": {"Uniform", "ELBO"},
    }
    assert any(c["expected"]["clipfrac"] > 0 for c in VALUES["cases"])  # the clip bites off policy


# ------------------------------------------------------------------------------------------ the method's wiring
def _method(overrides=(), parallelize=None) -> AWM:
    cfg = compose([*SMOKE, *overrides])
    method_cfg = OmegaConf.to_object(cfg.method)
    torch.manual_seed(0)
    backbone = build(cfg.model, "model", keep_reference=AWM.needs_reference(method_cfg))
    if parallelize is not None:
        parallelize(backbone)
    return AWM(method_cfg, backbone)


def _scored_rollout(method: AWM, seed: int = 0):
    rollout = method.rollout(["a red square", "a blue circle"], torch.Generator().manual_seed(seed))
    rollout.rewards = torch.linspace(0.1, 0.9, len(rollout))
    method.prepare_update(rollout)
    return rollout


@pytest.mark.parametrize("off_policy", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_backward_equals_an_independent_recomputation(off_policy):
    """Two micro-batches of ``AWM.backward`` give the gradient of the per-row loss averaged over every (sample,
    time) row of the update, with x_t, v_ref and v_ema recomputed here: the EMA weights loaded with
    ``load_state_dict``, the reference a copy. Off policy the ratio to the EMA policy is not 1."""
    overrides = ["method.kl_beta=0.01", f"method.off_policy={str(off_policy).lower()}", "method.clip_range=0.05"]
    method = _method(overrides)
    _lag(method, scale=0.02)
    rollout = _scored_rollout(method)
    bb, cfg = method.backbone, method.cfg
    model = bb.transformer
    model.zero_grad(set_to_none=True)
    for mb in (torch.tensor([0, 1]), torch.tensor([2, 3])):
        method.backward(rollout, mb, 4)
    ours = full_grads(model)

    trained = copy.deepcopy(model.state_dict())
    ema = {**trained, **{k: v.clone() for k, v in method.old_policy.copies.items()}}
    x0, steps = rollout.latents, rollout.train_steps
    noise = method.forward_noise(rollout, torch.arange(4))
    adv = scaled_advantages(rollout.advantages, cfg.adv_clip_max, cfg.advantage_max)
    model.zero_grad(set_to_none=True)
    ratios = []
    for j in range(steps.shape[1]):
        sigma = method.sigmas[steps[:, j]]
        xt = noised_latents(x0, noise[:, j], sigma)
        t = sigma.float()
        with torch.no_grad():
            model.load_state_dict(ema)
            v_ema = bb.velocity(xt, t, rollout.embeds)
            model.load_state_dict(trained)
            with bb.reference():
                v_ref = bb.velocity(xt, t, rollout.embeds)
        v = bb.velocity(xt, t, rollout.embeds)
        lp = matching_log_prob(v, noise[:, j], x0, sigma, cfg.weighting, cfg.ghuber_power)
        old = matching_log_prob(v_ema, noise[:, j], x0, sigma, cfg.weighting, cfg.ghuber_power) if off_policy else lp
        loss, stats = awm_loss(
            lp,
            old,
            adv,
            cfg.clip_range,
            kl_term(v, v_ref, sigma),
            cfg.kl_beta,
            kl_term(v, v_ema, sigma),
            cfg.ema_kl_beta,
        )
        ratios.append(stats["ratio"])
        (loss.mean() / steps.shape[1]).backward()
    theirs = full_grads(model)
    assert (torch.cat(ratios) != 1).any() == off_policy
    assert ours.keys() == theirs.keys()
    for k in theirs:
        torch.testing.assert_close(ours[k], theirs[k], rtol=1e-4, atol=1e-7, msg=k)


def test_rollouts_sample_the_trained_policy_on_policy_and_the_ema_policy_off_policy():
    on = _method()
    _lag(on)
    drawn = on.rollout(["a red square"], torch.Generator().manual_seed(0)).latents
    on.old_policy.copies = {n: c + 1.0 for n, c in on.old_policy.copies.items()}  # the EMA copy plays no part
    assert torch.equal(on.rollout(["a red square"], torch.Generator().manual_seed(0)).latents, drawn)
    off = _method(["method.off_policy=true", "method.updates_per_rollout=2"])
    _lag(off)
    assert not torch.equal(off.rollout(["a red square"], torch.Generator().manual_seed(0)).latents, drawn)


def test_a_rollout_keeps_final_latents_and_stratified_training_times():
    """Smoke grid N = 6, fraction 0.9: top index int(5.4) = 5, slices of linspace(0, 5, 7) truncated: one draw in
    each of [0,0], [0,1], [1,2], [2,3], [3,4], [4,5) (a draw never reaches its upper bound unless the slice is
    empty)."""
    method = _method()
    rollout = method.rollout(["a red square", "a blue circle"], torch.Generator().manual_seed(0))
    assert rollout.latents.shape == (4, *method.backbone.latent_shape) and rollout.log_probs is None
    t = rollout.train_steps
    lower, upper = torch.tensor([0, 0, 1, 2, 3, 4]), torch.tensor([0, 1, 2, 3, 4, 5])
    assert t.shape == (4, 6) and bool(((t >= lower) & ((t < upper) | (t == lower))).all())
    assert len(rollout.extras["noise_seeds"]) == 4


# -------------------------------------------------------------------------------------------- counts and config
@pytest.mark.parametrize(
    "overrides",
    [
        ["method.kl_beta=0", "method.ema_kl_beta=0", "method.train_timesteps=3"],
        ["method.off_policy=true", "method.ema_kl_beta=0", "method.updates_per_rollout=2", "method.sampler=euler"],
    ],
)
def test_pass_counts_per_step_are_the_declared_ones(tmp_path, overrides):
    cfg = compose([*SMOKE, "trainer.steps=1", *overrides])
    row = Trainer(cfg, RunInfo(run_dir=tmp_path)).train_step(0)
    fwd, bwd = AWM.passes_per_sample(cfg.method)
    m = cfg.method
    t = m.train_timesteps
    assert (fwd, bwd) == (m.sampling_steps + t * (1 + (m.kl_beta > 0) + (m.ema_kl_beta > 0 or m.off_policy)), t)
    assert (row["count/transformer_fwd"], row["count/transformer_bwd"]) == (4 * fwd, 4 * bwd)
    assert row["health/skipped_updates"] == 0 and ("awm/kl_ref" in row) == (m.kl_beta > 0)


@pytest.mark.parametrize(
    "overrides,match",
    [
        (["method.updates_per_rollout=2"], r"method.updates_per_rollout: must be 1 on policy"),
        (["method.beta=0.1"], r"method.beta: is DiffusionNFT's and not used by method=awm"),
        (["method.train_timesteps=0"], r"method.train_timesteps: must be >= 1"),
    ],
)
def test_bad_values_fail_before_anything_is_built(overrides, match):
    with pytest.raises(ConfigError, match=match):
        validate(compose([*SMOKE, *overrides]))


# ------------------------------------------------------------------------------------------------------- resume
@pytest.mark.slow
def test_interrupted_run_resumes_bitwise_with_its_ema_policy(tmp_path):
    """As tests/test_resume.py, with the EMA policy far from the trained one (fast decay): the checkpoint brings it
    back too."""
    cfg = compose(
        [*SMOKE, "trainer.steps=4", "trainer.ckpt_every=2", "model.finetune=lora", "model.lora_rank=4"]
        + ["method.old_decay_rate=0.2"]
    )
    ref, resumed = crash_and_resume(cfg, tmp_path)
    for k, v in ref.method.old_policy.copies.items():
        assert torch.equal(v, resumed.method.old_policy.copies[k]), k


# --------------------------------------------------------------------------------------------------- FSDP2, 2 ranks
def _sharded_work(rank, world, overrides):
    method = _method(overrides, parallelize=shard)
    _lag(method, scale=0.02)
    rollout = _scored_rollout(method)  # every rank draws the same rollout (same seed)
    mine = torch.arange(len(rollout))[rank::world]  # each rank trains its half
    method.backbone.transformer.zero_grad(set_to_none=True)
    method.backward(rollout, mine, len(mine))
    grads = full_grads(method.backbone.transformer)
    method.end_step(0)
    ema = {
        k: (c.full_tensor() if hasattr(c, "full_tensor") else c).clone() for k, c in method.old_policy.copies.items()
    }
    return rollout.latents, grads, ema


@pytest.mark.slow
def test_two_sharded_ranks_equal_one_process():
    """Off policy (the rollout and the ratio read the EMA policy under FSDP2): the rollout, the gradient and the
    updated EMA policy equal the single-process ones."""
    overrides = [
        "model.finetune=lora",
        "model.lora_rank=4",
        "method.kl_beta=0.01",
        "method.off_policy=true",
        "method.clip_range=0.05",
        "model.reference_dtype=float32",
    ]
    old_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        method = _method(overrides)
        _lag(method, scale=0.02)
        rollout = _scored_rollout(method)
        method.backbone.transformer.zero_grad(set_to_none=True)
        method.backward(rollout, torch.arange(len(rollout)), len(rollout))
        single = full_grads(method.backbone.transformer)
        method.end_step(0)
        ranks = run_distributed(_sharded_work, 2, overrides)
    finally:
        torch.set_num_threads(old_threads)
    for latents, grads, ema in ranks:
        torch.testing.assert_close(latents, rollout.latents, rtol=1e-5, atol=1e-6)
        assert grads.keys() == single.keys()
        for k, v in single.items():
            torch.testing.assert_close(grads[k], v, rtol=1e-4, atol=1e-7, msg=k)
        for k, v in method.old_policy.copies.items():
            torch.testing.assert_close(ema[k], v, rtol=1e-6, atol=1e-8, msg=k)
