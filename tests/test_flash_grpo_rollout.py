"""Flash-GRPO rollouts and updates (docs/methods/flash_grpo.md#tested-invariants, items 1-5 and 13) on toy
backbones, with and without true CFG, plus config validation and the method inside the shared trainer loop."""

from __future__ import annotations

import pytest
import torch

from conftest import compose
from flash_toys import MeanReward, ToyBackbone, flash_method
from launcher.train.trainer import RunInfo, Trainer
from launcher.validate import validate
from methods.sde_index import draw_sde_indices, group_sde_indices
from rewardflow.errors import ConfigError
from rewardflow.nfe_counter import NFECounter

N = 10
BASE = [f"sampling_steps={N}", "group_size=4", "prompts_per_step=3", "update_batch=4"]
PROMPTS = ["a red square", "a blue sky", "a red square"]  # the same prompt twice: two groups


def make(overrides=(), cfg_scale=None):
    return flash_method(ToyBackbone(cfg_scale=cfg_scale), [*BASE, *overrides])


def run_rollout(method, seed=0, every_state=False):
    """``every_state``: keep the whole trajectory (Flash-GRPO keeps x_k* and x_k*+1 only) to inspect it; its steps are
    drawn without the generator, so the rollout is the same either way."""
    method.train_steps_before_sampling = not every_state
    return method.rollout(PROMPTS, torch.Generator().manual_seed(seed))


def groups(rollout):
    keys = torch.tensor(rollout.group_keys)
    return [torch.nonzero(keys == k).flatten() for k in keys.unique()]


# ----------------------------------------------------------------------------------------------- invariant 1
@pytest.mark.parametrize("cfg_scale", [None, 4.5])
def test_iso_temporal_one_sde_step_per_rollout_shared_by_the_group(cfg_scale):
    method = make(cfg_scale=cfg_scale)
    assert method.pool == list(range(N // 2))
    for seed in range(5):
        ro = run_rollout(method, seed)
        stochastic, k, tau = ro.extras["stochastic"], ro.extras["sde_index"], ro.extras["tau"]
        assert stochastic.sum(1).tolist() == [1] * len(ro)  # exactly one SDE step per rollout
        assert torch.equal(stochastic.to(torch.int8).argmax(1), k) and torch.equal(ro.train_steps[:, 0], k)
        assert set(k.tolist()) <= set(method.pool)
        finite = torch.isfinite(ro.log_probs)
        assert torch.equal(finite, stochastic)  # log-probs only at k*
        for rows in groups(ro):
            assert (k[rows] == k[rows[0]]).all() and (tau[rows] == tau[rows[0]]).all()
        torch.testing.assert_close(tau, method.sde.sigma(k))


def test_kstar_draw_is_uniform_over_the_pool_chi_square():
    pool = list(range(10))
    draws = group_sde_indices(list(range(20000)), pool, "iid", True, torch.Generator().manual_seed(0))
    counts = torch.bincount(draws, minlength=10).double()
    chi2 = float(((counts - 2000) ** 2 / 2000).sum())
    assert set(draws.tolist()) == set(pool)
    assert chi2 < 27.88  # chi-square, 9 degrees of freedom, p = 0.001


def test_stratified_draw_covers_the_pool():
    pool = [0, 2, 4, 6, 8]
    for seed in range(20):
        k = draw_sde_indices(10, pool, "stratified", torch.Generator().manual_seed(seed))
        assert sorted(k.tolist()) == sorted(pool * 2)  # every index exactly twice over 10 prompts
    keys = [g for g in range(5) for _ in range(4)]
    k = group_sde_indices(keys, pool, "stratified", True, torch.Generator().manual_seed(0))
    assert sorted(k[::4].tolist()) == pool and all(len(set(k[4 * g : 4 * g + 4].tolist())) == 1 for g in range(5))


def test_kstar_is_keyed_by_group_id_not_prompt():
    seen_different, method = False, make()
    for seed in range(20):
        ro = run_rollout(method, seed)
        k = ro.extras["sde_index"]
        seen_different |= bool(k[0] != k[8])  # groups 0 and 2 have the same prompt
    assert seen_different


# ----------------------------------------------------------------------------------------------- invariant 2
def test_initial_and_sde_noise_are_independent_per_rollout_unless_shared():
    ro = run_rollout(make(), every_state=True)
    x0 = ro.latents[:, 0].flatten(1)
    assert torch.cdist(x0, x0).add(torch.eye(len(ro))).min() > 0  # all initial latents differ

    shared = make(["share_init_noise=true"])
    assert shared.cfg.init_same_noise  # the shared rollout's switch follows
    ro = run_rollout(shared, every_state=True)
    k = ro.extras["sde_index"]
    for rows in groups(ro):
        first = rows[0]
        for r in rows[1:]:
            assert torch.equal(ro.latents[r, 0], ro.latents[first, 0])
            assert torch.equal(ro.latents[r, k[r]], ro.latents[first, k[first]])  # same ODE path up to k*
            assert not torch.equal(ro.latents[r, k[r] + 1], ro.latents[first, k[first] + 1])  # xi differs
    assert not torch.equal(ro.latents[0, 0], ro.latents[4, 0])  # groups still differ


# ----------------------------------------------------------------------------------------------- invariant 3
def test_rollouts_are_reproducible_and_ode_steps_ignore_the_noise():
    method = make(cfg_scale=4.5)
    a, b = run_rollout(method, 3, every_state=True), run_rollout(method, 3)
    kept = b.latents.keep
    assert torch.equal(a.latents.full()[kept], b.latents.states.flatten(0, 1))  # the kept states are the same
    assert torch.equal(a.decode_latents, b.decode_latents)
    assert torch.equal(a.log_probs.nan_to_num(), b.log_probs.nan_to_num())

    # same x_0, different noise everywhere: identical before and at k*, different after
    fixed = make(["sde_index_pool=[3]"])
    x0 = fixed.backbone.initial_noise(12, torch.Generator().manual_seed(0))
    fixed.backbone.initial_noise = lambda n, generator=None: x0[:n].clone()
    a, b = run_rollout(fixed, 1, every_state=True), run_rollout(fixed, 2, every_state=True)
    assert torch.equal(a.latents[:, :4], b.latents[:, :4])
    assert not torch.equal(a.latents[:, 4], b.latents[:, 4])


def test_sde_step_with_zero_noise_is_the_mean_not_euler():
    from methods.sde import FlowSDEScheduler
    from models.sigma_grids import static_shift_sigmas

    sigmas = static_shift_sigmas(N, 3.0)
    g = torch.Generator().manual_seed(0)
    x, v = torch.randn(2, 6, generator=g, dtype=torch.float64), torch.randn(2, 6, generator=g, dtype=torch.float64)
    idx = torch.tensor([2, 2])
    euler = x + (sigmas[3] - sigmas[2]) * v
    for kernel in ("linear", "flow"):
        sde = FlowSDEScheduler(sigmas, kernel, 1.0 if kernel == "linear" else 0.7)
        out = sde.step(x, v, idx, noise=torch.zeros_like(x))
        assert torch.equal(out.prev_sample, out.mean) and (out.mean - euler).abs().max() > 1e-3
        tiny = FlowSDEScheduler(sigmas, kernel, 1e-7).step(x, v, idx, noise=torch.zeros_like(x))
        assert (tiny.mean - euler).abs().max() < 1e-12  # sigma_t -> 0: the Euler step


# -------------------------------------------------------------------------------------------- invariants 4, 5
def run_updates(method, ro):
    """The trainer's update phase for one rollout (without the optimizer step)."""
    method.prepare_update(ro)
    plan = method.update_plan(ro, torch.Generator().manual_seed(0))
    for update in plan:
        for mb in update:
            method.backward(ro, mb, sum(len(m) for m in update))
    return plan


@pytest.mark.parametrize("cfg_scale", [None, 4.5])
def test_transformer_passes_per_rollout(cfg_scale):
    """Rollout: N (x2 with CFG) forwards per sample; update: 1 (x2) forward + backward per sample, all at the stored
    (x_k*, tau_k*), every rollout in exactly one micro-batch."""
    method = make(cfg_scale=cfg_scale)
    calls = 1 if cfg_scale is None else 2
    counter = NFECounter(method.backbone.transformer)
    ro = run_rollout(method)
    method.score(ro, MeanReward())
    b = len(ro)
    assert counter.snapshot() == (b * N * calls, 0)
    seen = []
    hook = method.backbone.transformer.register_forward_hook(
        lambda mod, args, kwargs, out: seen.append((kwargs["hidden_states"].detach(), kwargs["timestep"])),
        with_kwargs=True,
    )
    plan = run_updates(method, ro)
    hook.remove()
    assert counter.snapshot() == (b * N * calls + b * calls, b * calls)
    order = torch.cat([torch.cat(u) for u in plan])
    assert sorted(order.tolist()) == list(range(b))  # each rollout in one micro-batch
    k = ro.extras["sde_index"][order]
    xs = torch.cat([x for x, _ in seen[::calls]])
    ts = torch.cat([t for _, t in seen[::calls]])
    assert torch.equal(xs, ro.latents[order, k]) and torch.equal(ts, method.sde.sigma(k).float())


@pytest.mark.parametrize("cfg_scale", [None, 4.5])
def test_replay_parity_and_zero_pre_update_clip_fraction(cfg_scale):
    method = make(cfg_scale=cfg_scale)
    ro = run_rollout(method, 4)
    method.score(ro, MeanReward())
    method.prepare_update(ro)
    method.update_plan(ro, torch.Generator().manual_seed(0))
    method.on_update_start(0)  # as the update loop does: the first update's rows are measured
    samples = torch.arange(len(ro))
    k = ro.train_steps[:, 0]
    with torch.no_grad():
        _, stats = method.step_loss(ro, samples, k, method.velocity_at(ro, samples, k))
    assert float((stats["ratio"] - 1).abs().max()) < 1e-6
    metrics = method.step_metrics()
    assert metrics["flash/pre_update_clip_frac"] == 0.0 and metrics["flash/pre_update_ratio_dev_max"] < 1e-6


def test_step_metrics_histogram_lambda_and_weights():
    method = make()
    ro = run_rollout(method, 2)
    method.score(ro, MeanReward())
    run_updates(method, ro)
    m = method.step_metrics()
    k = ro.extras["sde_index"]
    assert [m[f"flash/kstar_{i:02d}"] for i in method.pool] == [int((k == i).sum()) for i in method.pool]
    lam = 1 / ro.extras["inv_lambda"]
    assert m["flash/lambda_min"] == float(lam.min()) and m["flash/lambda_max"] == float(lam.max())
    w = ro.extras["weight"]
    assert m["flash/weight_min"] == float(w.min()) and m["flash/weight_max"] == float(w.max())
    assert method.step_metrics() == {}  # flushed: the next step starts empty


# ---------------------------------------------------------------------------------------------- invariant 13
def test_ablation_switches_change_only_what_they_should():
    full, itg = make(), make(["rectify=false"])
    a, b = run_rollout(full, 5), run_rollout(itg, 5)
    assert torch.equal(a.latents.states, b.latents.states) and torch.equal(a.extras["sde_index"], b.extras["sde_index"])
    for m, ro in ((full, a), (itg, b)):
        m.score(ro, MeanReward())
        m.prepare_update(ro)
        m.update_plan(ro, torch.Generator().manual_seed(0))
    assert torch.equal(a.advantages, b.advantages)
    assert torch.equal(b.extras["weight"], torch.ones(len(b), dtype=b.extras["weight"].dtype))
    assert not torch.allclose(a.extras["weight"], torch.ones_like(a.extras["weight"]))

    fast1 = make(["iso_temporal=false", "rectify=false"])
    spread = [len(set(run_rollout(fast1, s).extras["sde_index"][:4].tolist())) for s in range(5)]
    assert max(spread) > 1  # k* differs within a group
    assert all(r.extras["stochastic"].sum(1).eq(1).all() for r in [run_rollout(fast1, 0)])


# ----------------------------------------------------------------------------------------------- validation
@pytest.mark.parametrize(
    "overrides,key",
    [
        (["method.sde_index_pool=[0,9]"], "method.sde_index_pool"),  # 9 = N - 1 with the demo's N = 10
        (["method.sde_index_pool=[]"], "method.sde_index_pool"),
        (["method.sde_index_pool=[1,1]"], "method.sde_index_pool"),
        (["method.init_same_noise=true"], "method.init_same_noise"),
        (["method.clip_range=0"], "method.clip_range"),
    ],
)
def test_bad_flash_values_are_rejected_with_the_key(overrides, key):
    cfg = compose(["method=flash_grpo", *overrides])
    with pytest.raises(ConfigError) as err:
        validate(cfg)
    assert key in str(err.value)


def test_method_defaults_are_the_official_ones():
    m = compose(["method=flash_grpo"]).method
    assert (m.clip_range, m.adv_clip_max, m.global_std, m.kl_beta, m.group_size) == (1e-3, 5.0, True, 0.0, 8)
    assert (m.iso_temporal, m.rectify, m.weight_norm, m.share_init_noise, m.init_same_noise) == (
        True,
        True,
        "update",
        False,
        False,
    )
    assert m.sde_index_pool is None and m.sde_index_sampling == "iid"


# ------------------------------------------------------------------------------------- in the trainer loop
def test_flash_grpo_in_the_trainer_counts_one_backward_per_rollout(tmp_path):
    cfg = compose(
        ["experiment=smoke", "logger=none", "method=flash_grpo", "method.kl_beta=0.05", "method.kl_rectify=true"]
    )
    trainer = Trainer(cfg, RunInfo(run_dir=tmp_path))
    rows = [trainer.train_step(s) for s in range(2)]
    b, n = 4, 6  # smoke: 2 prompts x 2 generations, 6 steps
    for r in rows:
        assert r["count/transformer_bwd"] == b  # one backward per rollout
        assert r["count/transformer_fwd"] == b * n + 2 * b  # rollout + replay + the KL reference forward
        assert r["flash/pre_update_clip_frac"] == 0.0
        assert sum(r[f"flash/kstar_{i:02d}"] for i in range(n // 2)) == b
        assert any(key.startswith("flash/kl_ref_") for key in r) and "policy/kl_ref" in r
