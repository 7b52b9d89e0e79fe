"""Flash-GRPO math (docs/methods/flash_grpo.md#tested-invariants, items 6-12): lambda from real diffusers schedulers,
the gradient identity, rectified gradients, loss algebra, clipping, advantages and scheduler hygiene. float64 where
it matters."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from flash_toys import LATENT, IdentityBackbone, ToyBackbone, flash_method, sd3_euler, wan_unipc
from methods.base import Rollout
from methods.rectification import rectification_factor, rectification_weights
from methods.sde import FlowSDEScheduler
from models.backbone import PromptEmbeds

D = math.prod(LATENT)
N = 20

# docs/methods/flash_grpo.md#the-wan-20-lambda-table: k, tau, sigma_k, Delta_k, sigma_t, lambda, 1/lambda,
# 1/lambda / pool mean (k = 0..9)
WAN20 = [
    (0, 999, 0.99967, 0.01725, 0.98209, 0.1337, 7.4770, 1.3381),
    (1, 982, 0.98242, 0.01848, 0.96515, 0.1420, 7.0414, 1.2602),
    (2, 963, 0.96394, 0.01985, 0.94699, 0.1513, 6.6112, 1.1832),
    (3, 944, 0.94409, 0.02137, 0.92750, 0.1616, 6.1867, 1.1072),
    (4, 922, 0.92272, 0.02308, 0.90650, 0.1734, 5.7682, 1.0323),
    (5, 899, 0.89964, 0.02500, 0.88382, 0.1867, 5.3559, 0.9585),
    (6, 874, 0.87464, 0.02718, 0.85926, 0.2020, 4.9502, 0.8859),
    (7, 847, 0.84746, 0.02965, 0.83256, 0.2197, 4.5513, 0.8145),
    (8, 817, 0.81781, 0.03247, 0.80343, 0.2404, 4.1596, 0.7444),
    (9, 785, 0.78534, 0.03572, 0.77153, 0.2649, 3.7754, 0.6757),
]
WAN20_BEYOND = [0.2942, 0.3300, 0.3745, 0.4313, 0.5064, 0.6100, 0.7628, 1.0119, 1.4973, 2.9143]  # k = 10..19


def paper_wan_unipc(num_steps: int = N):
    """Wan2.1's real diffusers scheduler on the grid the paper's code ran with, u_i = 0.999 (N - i) / N.

    diffusers 0.42 builds its default flow grid from u_0 = 1 instead (``linspace(1, 1/1000, N + 1)[:-1]``), which
    moves lambda by up to ~6e-4 (< 1%) (see :func:`test_installed_default_unipc_grid_is_close_but_not_the_papers`); the
    scheduler shifts the grid it is given and appends sigma_N = 0 itself either way.
    """
    sched = wan_unipc(num_steps)
    sched.set_timesteps(sigmas=np.array([0.999 * (num_steps - i) / num_steps for i in range(num_steps)]))
    return sched


def wan_sde(num_steps: int = N) -> FlowSDEScheduler:
    return FlowSDEScheduler(paper_wan_unipc(num_steps).sigmas.double(), "linear", 1.0)


# ---------------------------------------------------------------------------------------------- invariant 8
def test_wan20_lambda_table_from_unipc_to_four_decimals():
    sched = paper_wan_unipc()
    sde = FlowSDEScheduler(sched.sigmas.double(), "linear", 1.0)
    k = torch.arange(N)
    lam = rectification_factor(sde, k)
    sigma, delta, g = sde.sigma(k), sde.sigma(k) - sde.sigmas[k + 1], sde.diffusion_coef(k)
    pool_mean = float((1 / lam[:10]).mean())
    for row in WAN20:
        i, tau, s, d, st, lm, inv, norm = row
        assert int(sched.timesteps[i]) == tau
        got = (
            float(sigma[i]),
            float(delta[i]),
            float(g[i]),
            float(lam[i]),
            float(1 / lam[i]),
            float(1 / lam[i]) / pool_mean,
        )
        for name, value, want in zip(
            ("sigma", "Delta", "sigma_t", "lambda", "1/lambda", "normalised"), got, (s, d, st, lm, inv, norm)
        ):
            assert abs(value - want) < 5e-5, f"k={i} {name}: {value:.6f} vs the table's {want}"
    assert abs(pool_mean - 5.5877) < 5e-5
    assert abs(float(lam[9] / lam[0]) - 1.9805) < 5e-5
    assert np.allclose(lam[10:].numpy(), WAN20_BEYOND, atol=5e-5, rtol=0)


def test_installed_default_unipc_grid_is_close_but_not_the_papers():
    """diffusers 0.42's default Wan grid starts at u = 1: its lambdas differ from the paper's at the 4th decimal
    (up to ~6e-4 in the pool, < 1% relative), so parity with the paper needs the paper's grid."""
    default = FlowSDEScheduler(wan_unipc(N).sigmas.double(), "linear", 1.0)
    paper = wan_sde(N)
    k = torch.arange(N)
    diff = (rectification_factor(default, k) - rectification_factor(paper, k)).abs()
    assert 1e-4 < float(diff[:10].max()) < 1e-3
    assert float((diff / rectification_factor(paper, k)).max()) < 0.01


def test_lambda_equals_the_closed_forms():
    """Closed forms: linear sigma_t = c t -> sqrt(D)/(c t) + c sqrt(D)(1 - t)/2; Flow-GRPO's a sqrt(t/(1-t)) ->
    sqrt(D (1 - t)/t)(1/a + a/2) for 0 < t < 1."""
    sde = wan_sde(N)
    k = torch.arange(N)
    t, d, c = sde.sigma(k), sde.sigma(k) - sde.sigmas[k + 1], sde.sigmas[1]
    torch.testing.assert_close(
        rectification_factor(sde, k), d.sqrt() / (c * t) + c * d.sqrt() * (1 - t) / 2, rtol=1e-12, atol=0
    )
    a = 0.7
    sd3 = FlowSDEScheduler(sd3_euler(10).sigmas.double(), "flow", a)
    k = torch.arange(1, 10)
    t, d = sd3.sigma(k), sd3.sigma(k) - sd3.sigmas[k + 1]
    torch.testing.assert_close(
        rectification_factor(sd3, k), torch.sqrt(d * (1 - t) / t) * (1 / a + a / 2), rtol=1e-12, atol=0
    )


def test_lambda_on_the_wan12_and_sd35_schedules():
    """The values listed under docs/methods/flash_grpo.md#the-wan-20-lambda-table for other schedules."""
    lam12 = rectification_factor(wan_sde(12), torch.arange(6))
    assert np.allclose(lam12.numpy(), [0.1769, 0.1959, 0.2189, 0.2473, 0.2830, 0.3291], atol=5e-5, rtol=0)
    sd3 = FlowSDEScheduler(sd3_euler(10).sigmas.double(), "flow", 0.7)
    lam = rectification_factor(sd3, torch.arange(10))
    listed = [0.0570, 0.0784, 0.1292, 0.1880, 0.2640, 0.3710, 0.5356, 0.8248, 1.4867, 1.7706]
    assert np.allclose(lam.numpy(), listed, atol=5e-5, rtol=0)


# ----------------------------------------------------------------------------------------------- invariant 9
def test_scheduler_hygiene_wan():
    sched = paper_wan_unipc()
    for k, tau in enumerate(sched.timesteps):
        assert sched.index_for_timestep(tau) == k
    assert float(sched.sigmas[-1]) == 0.0 and len(sched.sigmas) == N + 1
    sde = FlowSDEScheduler(sched.sigmas.double(), "linear", 1.0)
    k = torch.arange(N)
    torch.testing.assert_close(sde.diffusion_coef(k), sde.sigmas[1] * sde.sigma(k), rtol=1e-15, atol=0)
    assert not torch.allclose(sde.diffusion_coef(k), sde.sigmas[0] * sde.sigma(k))  # sigma_max is sigmas[1]


# ----------------------------------------------------------------------------------------------- invariant 6
@pytest.mark.parametrize("kernel,ks", [("linear", [0, 5, 9, 15]), ("flow", [0, 1, 4, 8]), ("cps", [0, 1, 4, 8])])
def test_gradient_identity_d_mean_logp_d_velocity(kernel, ks):
    """d(mean log pi)/d v = -lambda xi / D to 1e-9 in float64 (the derivation of lambda), with the sampler's code;
    under CPS's unnormalised log-prob too (lambda = 2 s |d mu / d v|, docs/cps.md)."""
    sde = wan_sde(N) if kernel == "linear" else FlowSDEScheduler(sd3_euler(10).sigmas.double(), kernel, 0.7)
    g = torch.Generator().manual_seed(0)
    for k in ks:
        idx = torch.tensor([k])
        x = torch.randn(1, *LATENT, generator=g, dtype=torch.float64)
        xi = torch.randn(1, *LATENT, generator=g, dtype=torch.float64)
        theta = torch.randn(1, *LATENT, generator=g, dtype=torch.float64, requires_grad=True)
        out = sde.step(x, theta.detach(), idx, noise=xi)
        logp, _ = sde.log_prob(out.prev_sample, x, theta, idx)
        (grad,) = torch.autograd.grad(logp.sum(), theta)
        expected = -rectification_factor(sde, idx) * xi / D
        assert float((grad - expected).abs().max()) < 1e-9


# ---------------------------------------------------------------------------------- rollouts built by hand
def hand_rollout(method, ks, adv=None, log_ratio=None, seed=0):
    """One sample per entry of ``ks``, all from the same x_k and the same xi, with ``v = theta`` (r = 1 unless
    ``log_ratio`` is given); float64 states."""
    sde, bb = method.sde, method.backbone
    b = len(ks)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, *LATENT, generator=g, dtype=torch.float64).expand(b, *LATENT)
    xi = torch.randn(1, *LATENT, generator=g, dtype=torch.float64).expand(b, *LATENT)
    idx = torch.tensor(ks)
    theta = bb.transformer.theta.detach().expand(b, *LATENT)
    out = sde.step(x, theta, idx, noise=xi)
    latents = torch.zeros(b, sde.num_steps + 1, *LATENT, dtype=torch.float64)
    latents[torch.arange(b), idx], latents[torch.arange(b), idx + 1] = x, out.prev_sample
    log_probs = torch.full((b, sde.num_steps), float("nan"), dtype=torch.float64)
    log_probs[torch.arange(b), idx] = out.log_prob - (0 if log_ratio is None else log_ratio)
    stochastic = torch.zeros(b, sde.num_steps, dtype=torch.bool)
    stochastic[torch.arange(b), idx] = True
    ro = Rollout(
        prompts=["p"] * b,
        group_keys=list(range(b)),
        embeds=PromptEmbeds({"text": torch.zeros(b, 4)}),
        images=torch.zeros(b, 3, 4, 4),
        latents=latents,
        log_probs=log_probs,
        train_steps=method.select_train_steps(stochastic, None),
        advantages=torch.ones(b, dtype=torch.float64) if adv is None else adv.double(),
    )
    ro.extras.update(sde_index=idx, inv_lambda=1 / rectification_factor(sde, idx))
    plan = method.update_plan(ro, torch.Generator().manual_seed(1))
    return ro, plan, xi[0]


def per_sample_grads(method, ro):
    theta = method.backbone.transformer.theta
    grads, losses = [], []
    for i in range(len(ro)):
        theta.grad = None
        stats = method.backward(ro, torch.tensor([i]), update_size=1)
        grads.append(theta.grad.clone())
        losses.append(float(stats["loss"]))
    return torch.stack(grads), torch.tensor(losses, dtype=torch.float64)


WAN_OVERRIDES = [
    "noise_kernel=linear",
    "eta=1.0",
    "sampling_steps=20",
    "updates_per_rollout=1",
    "shuffle_samples=false",
    "update_batch=1",
]


def identity_method(monkeypatch, extra=()):
    bb = IdentityBackbone(dtype=torch.float64)
    return flash_method(bb, [*WAN_OVERRIDES, *extra], sigmas=paper_wan_unipc().sigmas.double(), monkeypatch=monkeypatch)


# ----------------------------------------------------------------------------------------------- invariant 7
@pytest.mark.parametrize("kernel", [[], ["noise_kernel=cps", "eta=0.8"]], ids=["linear", "cps"])
def test_rectified_per_sample_gradients_are_equal_across_k(monkeypatch, kernel):
    method = identity_method(monkeypatch, kernel)
    ks = list(range(10))
    ro, _, xi = hand_rollout(method, ks)
    grads, _ = per_sample_grads(method, ro)
    inv = 1 / rectification_factor(method.sde, torch.tensor(ks))
    expected = xi / (D * inv.mean())  # d loss / d theta = -w grad log pi = +xi / (D mean(1/lambda))
    for k in ks:
        assert float((grads[k] - expected).abs().max()) < 1e-12, f"k={k}"

    plain = identity_method(monkeypatch, [*kernel, "rectify=false"])
    ro, _, xi = hand_rollout(plain, ks)
    grads, _ = per_sample_grads(plain, ro)
    norms = grads.flatten(1).norm(dim=1)
    lam = rectification_factor(plain.sde, torch.tensor(ks))
    torch.testing.assert_close(norms / norms[0], lam / lam[0], rtol=1e-10, atol=0)  # unrectified: ~ lambda(k)


def test_rectification_evens_out_mlp_gradient_norms_across_timesteps(monkeypatch):
    """A real MLP (through CFG-free velocity): the median per-sample gradient norm over many xi follows lambda
    without rectification and agrees across timestep buckets with it (ratio < 1.3)."""
    torch.manual_seed(0)
    sde = wan_sde(N)
    net = ToyBackbone(dtype=torch.float64).transformer
    params = list(net.parameters())
    g = torch.Generator().manual_seed(3)
    x = torch.randn(1, *LATENT, generator=g, dtype=torch.float64)
    medians = []
    for k in (0, 3, 6, 9):
        idx = torch.tensor([k])
        t = sde.sigma(idx)
        norms = []
        for _ in range(40):
            v = net(hidden_states=x, timestep=t, text=torch.zeros(1, 4, dtype=torch.float64))[0]
            out = sde.step(x, v.detach(), idx, generator=g)
            logp, _ = sde.log_prob(out.prev_sample, x, v, idx)
            grads = torch.autograd.grad(logp.sum(), params)
            norms.append(float(torch.sqrt(sum((gr**2).sum() for gr in grads))))
        medians.append(float(np.median(norms)))
    lam = rectification_factor(sde, torch.tensor([0, 3, 6, 9])).numpy()
    raw = np.array(medians)
    rect = raw / lam
    assert rect.max() / rect.min() < 1.3
    assert raw.max() / raw.min() > 1.7 and np.argmax(raw) == 3  # lambda(9) / lambda(0) = 1.98


# ---------------------------------------------------------------------------------------------- invariant 10
def test_loss_is_minus_mean_weight_and_one_hot_ratio(monkeypatch):
    method = identity_method(monkeypatch)
    ro, plan, _ = hand_rollout(method, [0, 9, 9, 3, 5, 0, 7])
    assert len(plan) == 1
    w = ro.extras["weight"]
    assert abs(float(w.mean()) - 1.0) < 1e-12  # weights average to 1 over the update
    _, losses = per_sample_grads(method, ro)  # r = 1, A = 1: loss_i = -w_i
    torch.testing.assert_close(losses, -w, rtol=1e-12, atol=0)
    assert abs(float(losses.mean()) + 1.0) < 1e-12

    # one-hot advantage at k = 0 against k = 9: the loss ratio is 1/lambda(0) / 1/lambda(9) = 1.9805
    ro, _, _ = hand_rollout(method, [0, 9])
    _, losses = per_sample_grads(method, ro)
    assert abs(float(losses[0] / losses[1]) - 1.9805) < 5e-5


def test_weight_normalisations():
    inv = torch.tensor([7.0, 5.0, 3.0], dtype=torch.float64)
    pool = torch.tensor([8.0, 6.0, 4.0, 2.0], dtype=torch.float64)
    w, denom = rectification_weights(inv, "update", pool)
    assert denom == 5.0 and abs(float(w.mean()) - 1) < 1e-15
    w, denom = rectification_weights(inv, "pool", pool)
    assert denom == 5.0 and torch.equal(w, inv / 5.0)
    w, denom = rectification_weights(inv, "none")
    assert denom == 1.0 and torch.equal(w, inv)


# ---------------------------------------------------------------------------------------------- invariant 11
def test_clipping_decisions_identical_with_and_without_rectification(monkeypatch):
    eps = 1e-3
    g = torch.Generator().manual_seed(7)
    ks = torch.randint(0, 10, (24,), generator=g).tolist()
    log_ratio = (torch.rand(24, generator=g, dtype=torch.float64) - 0.5) * 6 * eps
    adv = torch.randn(24, generator=g, dtype=torch.float64)
    results = {}
    for rectify in (True, False):
        method = identity_method(monkeypatch, [f"rectify={str(rectify).lower()}", "clip_range=1e-3"])
        ro, _, _ = hand_rollout(method, ks, adv=adv, log_ratio=log_ratio)
        idx = ro.train_steps[:, 0]
        v = method.velocity_at(ro, torch.arange(24), idx)
        _, stats = method.step_loss(ro, torch.arange(24), idx, v)
        grads, _ = per_sample_grads(method, ro)
        results[rectify] = (stats["clipped"], grads, ro.extras["weight"])
    clipped, grads, w = results[True]
    assert torch.equal(clipped, results[False][0]) and 0 < int(clipped.sum()) < 24
    ratio = torch.exp(log_ratio)
    binds = ((adv > 0) & (ratio > 1 + eps)) | ((adv < 0) & (ratio < 1 - eps))
    assert binds.any() and (clipped.bool() | ~binds).all()
    for i in range(24):
        if binds[i]:  # the clip binds: zero gradient, with and without the weight
            assert grads[i].abs().max() == 0 and results[False][1][i].abs().max() == 0
        else:  # otherwise the weight only rescales the gradient
            torch.testing.assert_close(grads[i], w[i] * results[False][1][i], rtol=1e-12, atol=1e-18)


# ---------------------------------------------------------------------------------------------- invariant 12
def test_advantages_keyed_by_group_id_with_global_std_and_clamp(monkeypatch):
    method = identity_method(monkeypatch, ["group_size=3", "prompts_per_step=3"])
    rewards = torch.tensor([1.0, 2.0, 6.0, 0.0, 0.5, 1.0, 3.0, 3.5, 2.0], dtype=torch.float64)
    ro = Rollout(
        prompts=["a"] * 6 + ["b"] * 3,
        group_keys=[0, 0, 0, 1, 1, 1, 2, 2, 2],
        embeds=PromptEmbeds({"text": torch.zeros(9, 4)}),
        images=torch.zeros(9, 3, 4, 4),
        rewards=rewards,
    )
    method.prepare_update(ro)
    adv = ro.advantages
    group_mean = rewards.view(3, 3).mean(1).repeat_interleave(3)
    for grp in range(3):  # the same prompt twice in a step is two groups (two k*)
        assert abs(float(adv[3 * grp : 3 * grp + 3].mean())) < 1e-12
    torch.testing.assert_close(adv * (rewards.std(unbiased=False) + 1e-4), rewards - group_mean)

    clamp = identity_method(monkeypatch, ["group_size=3", "prompts_per_step=3", "adv_clip_max=0.5"])
    ro2, _, _ = hand_rollout(clamp, [0, 9, 4])
    ro2.group_keys, ro2.rewards = [0, 0, 0], torch.tensor([0.0, 10.0, 3.0], dtype=torch.float64)
    clamp.prepare_update(ro2)
    raw = (ro2.rewards - ro2.rewards.mean()) / (ro2.rewards.std(unbiased=False) + 1e-4)
    assert float(raw.abs().max()) > 1.0 and float(ro2.advantages.abs().max()) == 0.5
    _, losses = per_sample_grads(clamp, ro2)  # r = 1: the loss is -w clamp(A), clamped before weighting
    torch.testing.assert_close(losses, -ro2.extras["weight"] * raw.clamp(-0.5, 0.5), rtol=1e-12, atol=0)
