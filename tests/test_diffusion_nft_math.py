"""DiffusionNFT's math in float64 against transcriptions of the authors' code (NVlabs/DiffusionNFT @24af555):
the loss and its gradient (scripts/train_nft_sd3.py:909-970), the sampling policy's decay (169-189, 1034-1039) and
the dpm2 rollout solver (flow_grpo/diffusers_patch/solver.py:14-75, 207-356) against diffusers' scheduler.
The loss and the policy update are checked in float64; the solvers in float32, in which diffusers' schedulers step."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from methods.diffusion_nft_config import AdvMode, Sampler
from methods.nft_loss import nft_loss, optimality_weight
from methods.ode_solvers import make_solver, solve
from methods.old_policy import LaggingPolicy, old_policy_decay
from methods.schedule import linear_shift_sigmas
from models.sigma_grids import static_shift_sigmas

float64 = pytest.mark.usefixtures("float64")

LATENT = (2, 3, 4)


# --------------------------------------------------------------------------------------------- the loss, verbatim
def authors_loss(forward_prediction, old_prediction, ref_forward_prediction, x0, xt, t, advantages, config):
    """scripts/train_nft_sd3.py lines 866-970 as written there (logging left out): the scalar loss of one
    micro-batch at one trained timestep; ``t`` is timesteps / 1000."""
    t_expanded = t.view(-1, *([1] * (len(x0.shape) - 1)))
    advantages_clip = torch.clamp(advantages, -config.train.adv_clip_max, config.train.adv_clip_max)
    if config.train.adv_mode == "positive_only":
        advantages_clip = torch.clamp(advantages_clip, 0, config.train.adv_clip_max)
    elif config.train.adv_mode == "negative_only":
        advantages_clip = torch.clamp(advantages_clip, -config.train.adv_clip_max, 0)
    elif config.train.adv_mode == "one_only":
        advantages_clip = torch.where(
            advantages_clip > 0, torch.ones_like(advantages_clip), torch.zeros_like(advantages_clip)
        )
    elif config.train.adv_mode == "binary":
        advantages_clip = torch.sign(advantages_clip)
    normalized_advantages_clip = (advantages_clip / config.train.adv_clip_max) / 2.0 + 0.5
    r = torch.clamp(normalized_advantages_clip, 0, 1)
    positive_prediction = config.beta * forward_prediction + (1 - config.beta) * old_prediction.detach()
    implicit_negative_prediction = (1.0 + config.beta) * old_prediction.detach() - config.beta * forward_prediction
    x0_prediction = xt - t_expanded * positive_prediction
    with torch.no_grad():
        weight_factor = (
            torch.abs(x0_prediction.double() - x0.double())
            .mean(dim=tuple(range(1, x0.ndim)), keepdim=True)
            .clip(min=0.00001)
        )
    positive_loss = ((x0_prediction - x0) ** 2 / weight_factor).mean(dim=tuple(range(1, x0.ndim)))
    negative_x0_prediction = xt - t_expanded * implicit_negative_prediction
    with torch.no_grad():
        negative_weight_factor = (
            torch.abs(negative_x0_prediction.double() - x0.double())
            .mean(dim=tuple(range(1, x0.ndim)), keepdim=True)
            .clip(min=0.00001)
        )
    negative_loss = ((negative_x0_prediction - x0) ** 2 / negative_weight_factor).mean(dim=tuple(range(1, x0.ndim)))
    ori_policy_loss = r * positive_loss / config.beta + (1.0 - r) * negative_loss / config.beta
    policy_loss = (ori_policy_loss * config.train.adv_clip_max).mean()
    loss = policy_loss
    kl_div_loss = ((forward_prediction - ref_forward_prediction) ** 2).mean(dim=tuple(range(1, x0.ndim)))
    loss += config.train.beta * torch.mean(kl_div_loss)
    return loss


def small_case(seed: int):
    """Four samples: x0, noise and the three policies' velocities from a tiny affine 'model' v = W x_t + u t whose
    parameters get the gradient; advantages span both clamps (+-5) and zero."""
    g = torch.Generator().manual_seed(seed)
    b, d = 4, math.prod(LATENT)
    x0 = torch.randn(b, *LATENT, generator=g)
    noise = torch.randn(b, *LATENT, generator=g)
    t = torch.tensor([1.0, 0.7, 0.31, 0.05])  # includes pure noise, as the SD3 grid does
    xt = (1 - t.view(-1, 1, 1, 1)) * x0 + t.view(-1, 1, 1, 1) * noise
    w = (torch.eye(d) + 0.1 * torch.randn(d, d, generator=g)).requires_grad_(True)
    u = torch.randn(d, generator=g).requires_grad_(True)
    model = lambda w_, u_: (xt.flatten(1) @ w_.T + t[:, None] * u_).view(b, *LATENT)  # noqa: E731
    with torch.no_grad():
        v_old = model(w + 0.05 * torch.randn(d, d, generator=g), u + 0.1 * torch.randn(d, generator=g))
        v_ref = model(torch.eye(d), torch.zeros(d))
    advantages = torch.tensor([7.5, 1.3, 0.0, -6.0])
    return x0, xt, t, (w, u), model, v_old, v_ref, advantages


@float64
@pytest.mark.parametrize(
    "beta,kl_beta,adv_mode",
    [
        (1.0, 1e-4, "all"),
        (0.1, 1e-4, "all"),
        (0.1, 0.0, "binary"),
        (0.5, 0.3, "positive_only"),
        (1.0, 0.0, "negative_only"),
        (0.1, 0.0, "one_only"),
    ],
)
def test_loss_and_gradient_equal_the_authors_code(beta, kl_beta, adv_mode):
    x0, xt, t, (w, u), model, v_old, v_ref, adv = small_case(0)
    config = SimpleNamespace(beta=beta, train=SimpleNamespace(adv_clip_max=5.0, adv_mode=adv_mode, beta=kl_beta))
    ref = authors_loss(model(w, u), v_old, v_ref, x0, xt, t, adv, config)
    ref_grads = torch.autograd.grad(ref, (w, u))

    r = optimality_weight(adv, 5.0, adv_mode)
    ours, stats = nft_loss(model(w, u), v_old, x0, xt, t, r, beta, 5.0, kl_beta, v_ref if kl_beta > 0 else None)
    ours = ours.mean()  # theirs is the micro-batch mean; ours per sample (the trainer sums)
    grads = torch.autograd.grad(ours, (w, u))
    assert ours.dtype == torch.float64 and float(ref.detach()) > 0
    torch.testing.assert_close(ours, ref, rtol=1e-13, atol=0)
    for ours_g, ref_g in zip(grads, ref_grads):
        assert float(ref_g.abs().max()) > 1e-3  # a real gradient, not a vanishing one
        torch.testing.assert_close(ours_g, ref_g, rtol=1e-12, atol=1e-14)
    assert ("kl" in stats) == (kl_beta > 0)


@float64
def test_optimality_weight_is_half_at_zero_advantage_and_saturates_at_the_clamp():
    a = torch.tensor([-100.0, -5.0, -2.5, 0.0, 2.5, 5.0, 100.0])
    torch.testing.assert_close(optimality_weight(a, 5.0), torch.tensor([0.0, 0.0, 0.25, 0.5, 0.75, 1.0, 1.0]))
    assert set(AdvMode) == {"all", "positive_only", "negative_only", "one_only", "binary"}
    with pytest.raises(ValueError, match="adv_mode"):
        optimality_weight(a, 5.0, "clip")


@float64
def test_at_v_equal_v_old_the_gradient_pushes_towards_the_positive_branch():
    """With v = v_old (the first update after a sync), r = 1 pulls the x0 prediction towards x0 and r = 0 away from
    it, and r = 1/2 is stationary: d loss / d v = (c / beta) beta sigma (1 - 2 r) (x0_pred - x0) / w, up to sign."""
    g = torch.Generator().manual_seed(3)
    x0, v0 = torch.randn(3, *LATENT, generator=g), torch.randn(3, *LATENT, generator=g)
    sigma = torch.tensor([0.4, 0.4, 0.4])
    xt = torch.randn(3, *LATENT, generator=g)
    v = v0.clone().requires_grad_(True)
    loss, _ = nft_loss(v, v0, x0, xt, sigma, torch.tensor([1.0, 0.0, 0.5]), 0.1, 5.0)
    (grad,) = torch.autograd.grad(loss.sum(), v)
    err = xt - sigma.view(-1, 1, 1, 1) * v0 - x0
    w = err.abs().flatten(1).mean(1).view(-1, 1, 1, 1)
    expected = 5.0 * 2 * err * (-0.4) / w / err[0].numel() * torch.tensor([1.0, -1.0, 0.0]).view(-1, 1, 1, 1)
    torch.testing.assert_close(grad, expected, rtol=1e-12, atol=1e-15)


# ------------------------------------------------------------------------------------------- the sampling policy
def authors_return_decay(step, decay_type):
    """scripts/train_nft_sd3.py:169-189."""
    flat, uprate, uphold = {0: (0, 0.0, 0.0), 1: (0, 0.001, 0.5), 2: (75, 0.0075, 0.999)}[decay_type]
    return 0.0 if step < flat else min((step - flat) * uprate, uphold)


@float64
@pytest.mark.parametrize("decay_type,args", [(0, (0, 0.0, 0.0)), (1, (0, 0.001, 0.5)), (2, (75, 0.0075, 0.999))])
def test_decay_schedules_are_the_authors(decay_type, args):
    for step in (0, 1, 2, 74, 75, 76, 100, 208, 499, 500, 501, 5000):
        assert old_policy_decay(step, *args) == authors_return_decay(step, decay_type)


@float64
def test_lagging_copy_moves_as_theirs_and_swaps_in_and_out_exactly():
    lin = torch.nn.Linear(3, 2)
    lin.bias.requires_grad_(False)  # frozen parameters are not copied
    lagging = LaggingPolicy(lin)
    assert list(lagging.state_dict()) == ["old_policy.weight"]
    old = lin.weight.detach().clone()
    with torch.no_grad():
        lin.weight.add_(1.0)
    trained = lin.weight.detach().clone()
    lagging.update(0.3)
    expected = old * 0.3 + trained.clone() * (1.0 - 0.3)  # their lines 1036-1039
    torch.testing.assert_close(lagging.copies["weight"], expected, rtol=0, atol=1e-15)
    x = torch.randn(5, 3)
    with lagging.active():
        torch.testing.assert_close(lin(x), x @ expected.T + lin.bias)
    assert torch.equal(lin.weight, trained)  # bitwise back


# -------------------------------------------------------------------------------------------------- the solvers
def gaussian_velocity(mean: float, std: float):
    """Exact velocity dx/dsigma of data N(mean, std^2) on x = (1 - sigma) x0 + sigma eps, and its exact flow map."""

    def v(x, sigma):
        s = sigma.view(-1, *([1] * (x.ndim - 1))).to(x.dtype)
        a = 1 - s
        x0_hat = mean + a * std**2 / (a * a * std**2 + s * s) * (x - a * mean)
        return (x - x0_hat) / s

    return v, (lambda eps: mean + std * eps)


def authors_dpm2(v_pred_fn, z, sigma_schedule):
    """flow_grpo/diffusers_patch/solver.py ``run_sampling(solver="dpm2", determistic=True)``: DDIM (eta 0) at the
    first and last step, multistep DPM-Solver++(2M) in between (lines 207-260, 275-356)."""

    def alpha_sigma(s):
        return 1 - s, s

    def ddim(x0_pred, i, sample):
        t, s = sigma_schedule[i + 1], sigma_schedule[i]
        noise_pred = (sample - (1 - s) * x0_pred) / s
        return (1 - t) * x0_pred + t * noise_pred  # rho_t = 0: prev_mean

    def first_order(x0_pred, i, sample):
        (a_t, s_t), (a_s, s_s) = alpha_sigma(sigma_schedule[i + 1]), alpha_sigma(sigma_schedule[i])
        h = (torch.log(a_t) - torch.log(s_t)) - (torch.log(a_s) - torch.log(s_s))
        return (s_t / s_s) * sample - (a_t * (torch.exp(-h) - 1.0)) * x0_pred

    def second_order(m0, m1, i, sample):
        (a_t, s_t), (a_0, s_0), (a_1, s_1) = (alpha_sigma(sigma_schedule[j]) for j in (i + 1, i, i - 1))
        lam_t, lam_0, lam_1 = (torch.log(a) - torch.log(s) for a, s in ((a_t, s_t), (a_0, s_0), (a_1, s_1)))
        h, h_0 = lam_t - lam_0, lam_0 - lam_1
        d0, d1 = m0, (1.0 / (h_0 / h)) * (m0 - m1)
        return (s_t / s_0) * sample - (a_t * (torch.exp(-h) - 1.0)) * d0 - 0.5 * (a_t * (torch.exp(-h) - 1.0)) * d1

    n = len(sigma_schedule) - 1
    outputs, lower_order_nums = [None, None], 0
    for i in range(n):
        x0_pred = z - sigma_schedule[i] * v_pred_fn(z, sigma_schedule[i].expand(z.shape[0]))
        outputs = [outputs[1], x0_pred]
        final = i == n - 1
        if lower_order_nums < 1 or final:
            z = ddim(x0_pred, i, z) if (i == 0 or final) else first_order(x0_pred, i, z)
        else:
            z = second_order(outputs[1], outputs[0], i, z)
        lower_order_nums = min(lower_order_nums + 1, 2)
    return z


@pytest.mark.parametrize("n", [10, 25])
def test_dpmpp_2m_is_the_authors_dpm2(n):
    sigmas = static_shift_sigmas(n, 3.0)
    v, _ = gaussian_velocity(0.4, 0.5)
    eps = torch.randn(3, *LATENT, generator=torch.Generator().manual_seed(n))
    ours = solve("dpmpp_2m", sigmas, v, eps.clone())
    theirs = authors_dpm2(v, eps.clone(), sigmas)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)  # diffusers steps in float32


def test_euler_is_the_plain_euler_step_on_the_given_grid():
    sigmas = static_shift_sigmas(10, 3.0)
    v, _ = gaussian_velocity(-0.2, 0.7)
    x = torch.randn(2, *LATENT, generator=torch.Generator().manual_seed(1))
    ref = x.clone()
    for i in range(10):
        ref = ref + (sigmas[i + 1] - sigmas[i]) * v(ref, sigmas[i].expand(2))
    torch.testing.assert_close(solve("euler", sigmas, v, x), ref, rtol=1e-5, atol=1e-5)


def test_every_solver_steps_on_the_grid_it_is_given():
    sigmas = static_shift_sigmas(7, 3.0)
    for name in Sampler:
        solver = make_solver(name, sigmas)
        torch.testing.assert_close(solver.sigmas.double(), sigmas, rtol=0, atol=1e-7)
        assert len(solver.timesteps) == 7


@pytest.mark.parametrize("std", [0.4, 1.5])
def test_second_order_solvers_beat_euler_on_a_uniform_grid(std):
    """On Gaussian data (exact flow map known) and the unshifted grid 1 - i/N, DPM-Solver++(2M) and UniPC are at
    least 5x more accurate than Euler at equal steps. (On the shift-3 grid of 10 steps they are not: its last steps
    are long in log-SNR; docs/methods/diffusion_nft.md.)"""
    v, flow_map = gaussian_velocity(0.3, std)
    eps = torch.randn(64, *LATENT, generator=torch.Generator().manual_seed(2))
    for n in (10, 20, 40):
        err = {
            name: float((solve(name, linear_shift_sigmas(n, 1.0), v, eps.clone()) - flow_map(eps)).abs().mean())
            for name in Sampler
        }
        assert err["dpmpp_2m"] < err["euler"] / 5 and err["unipc"] < err["euler"] / 5, (n, err)
