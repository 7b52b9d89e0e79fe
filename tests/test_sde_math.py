"""docs/methods/grpo_baselines.md#tested-invariants, items 1-3: the unified SDE step against both repos' code
forms, schedules, rho = 1."""

from __future__ import annotations

import math

import pytest
import torch

from methods.schedule import linear_shift_sigmas, quantize_model_time, time_shift
from methods.sde import FlowSDEScheduler, gaussian_log_prob
from models.sigma_grids import static_shift_sigmas

pytestmark = pytest.mark.usefixtures("float64")  # the documented invariants, in float64 (conftest)


def dance_flux_step(x, v, sigma, sigma_next, eta, noise):
    """DanceGRPO's ``flux_step`` (sde_solver=True), written as in the repo: ODE mean plus a score term."""
    dsigma = sigma_next - sigma
    mean = x + dsigma * v
    pred_x0 = x - sigma * v
    std = eta * math.sqrt(sigma - sigma_next)
    score = -(x - pred_x0 * (1 - sigma)) / sigma**2
    log_term = -0.5 * eta**2 * score
    mean = mean + log_term * dsigma
    prev = mean + noise * std
    logp = -((prev - mean) ** 2) / (2 * std**2) - math.log(std) - math.log(math.sqrt(2 * math.pi))
    return prev, mean, std, logp.flatten(1).mean(1)


def flow_grpo_step(x, v, sigma, sigma_next, sigma_1, a, noise):
    """Flow-GRPO's ``sde_step_with_logprob`` (sde_type='sde'), written as in the repo."""
    dt = sigma_next - sigma
    std_t = math.sqrt(sigma / (1 - (sigma_1 if sigma == 1 else sigma))) * a
    mean = x * (1 + std_t**2 / (2 * sigma) * dt) + v * (1 + std_t**2 * (1 - sigma) / (2 * sigma)) * dt
    std = std_t * math.sqrt(-dt)
    prev = mean + std * noise
    logp = -((prev - mean) ** 2) / (2 * std**2) - math.log(std) - math.log(math.sqrt(2 * math.pi))
    return prev, mean, std, logp.flatten(1).mean(1)


@pytest.mark.parametrize("i", [0, 3, 9])
def test_dance_form_equals_unified_step(i):
    sigmas = linear_shift_sigmas(10, 3.0)
    sde = FlowSDEScheduler(sigmas, "dance", eta=0.3)
    g = torch.Generator().manual_seed(i)
    x, v, noise = (torch.randn(3, 8, 4, generator=g) for _ in range(3))
    ref = dance_flux_step(x, v, float(sigmas[i]), float(sigmas[i + 1]), 0.3, noise)
    out = sde.step(x, v, torch.full((3,), i), noise=noise)
    torch.testing.assert_close(out.prev_sample, ref[0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out.mean, ref[1], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out.std, torch.full((3,), ref[2]), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out.log_prob, ref[3], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("i", [0, 4, 8])
def test_flow_grpo_form_equals_unified_step(i):
    sigmas = static_shift_sigmas(10, 3.0)
    sde = FlowSDEScheduler(sigmas, "flow", eta=0.7)
    g = torch.Generator().manual_seed(10 + i)
    x, v, noise = (torch.randn(2, 6, 4, generator=g) for _ in range(3))
    ref = flow_grpo_step(x, v, float(sigmas[i]), float(sigmas[i + 1]), float(sigmas[1]), 0.7, noise)
    out = sde.step(x, v, torch.full((2,), i), noise=noise)
    torch.testing.assert_close(out.prev_sample, ref[0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out.mean, ref[1], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out.std, torch.full((2,), ref[2]), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out.log_prob, ref[3], rtol=1e-10, atol=1e-10)


def test_std_is_g_sqrt_minus_delta_and_ode_rows_are_euler():
    sigmas = linear_shift_sigmas(8, 3.0)
    sde = FlowSDEScheduler(sigmas, "flow", eta=0.9)
    idx = torch.tensor([1, 2, 5])
    g = sde.diffusion_coef(idx)
    _, std = sde.mean_std(torch.zeros(3, 4), torch.zeros(3, 4), idx)
    torch.testing.assert_close(std, g * torch.sqrt(sigmas[idx] - sigmas[idx + 1]))
    x, v = torch.randn(3, 4), torch.randn(3, 4)
    out = sde.step(x, v, idx, stochastic=torch.tensor([False, True, False]))
    euler = x + (sigmas[idx + 1] - sigmas[idx])[:, None] * v
    torch.testing.assert_close(out.prev_sample[[0, 2]], euler[[0, 2]], rtol=0, atol=1e-15)
    assert torch.isnan(out.log_prob[[0, 2]]).all() and torch.isfinite(out.log_prob[1])


def test_kappa_is_d_mean_d_velocity():
    sde = FlowSDEScheduler(linear_shift_sigmas(6, 3.0), "dance", eta=0.3)
    idx = torch.tensor([0, 2, 4])
    x, v = torch.randn(3, 5), torch.randn(3, 5, requires_grad=True)
    mean, _ = sde.mean_std(x, v, idx)
    (grad,) = torch.autograd.grad(mean.sum(), v)
    torch.testing.assert_close(grad, sde.velocity_coef(idx)[:, None].expand(3, 5))


def test_schedules():
    for n, s in [(10, 3.0), (21, 3.0), (16, 1.0)]:
        sig = linear_shift_sigmas(n, s)
        assert sig[0] == 1.0 and sig[-1] == 0.0 and sig.numel() == n + 1
        assert (sig[1:] < sig[:-1]).all()
        torch.testing.assert_close(sig, time_shift(1 - torch.arange(n + 1) / n, s))
    # the N=21, S=3 table of docs/methods/grpo_baselines.md#sigma-schedules
    expected = [
        1.0,
        0.9836,
        0.9661,
        0.9474,
        0.9273,
        0.9057,
        0.8824,
        0.8571,
        0.8298,
        0.8,
        0.7674,
        0.7317,
        0.6923,
        0.6486,
        0.6,
        0.5455,
        0.4839,
        0.4138,
        0.3333,
        0.24,
        0.1304,
        0.0,
    ]
    torch.testing.assert_close(linear_shift_sigmas(21, 3.0), torch.tensor(expected), atol=5e-5, rtol=0)
    sch = static_shift_sigmas(10, 3.0)
    assert sch[0] == 1.0 and sch[-1] == 0.0 and (sch[1:] < sch[:-1]).all()
    # diffusers shifts the endpoint twice: the last non-zero sigma is shift(shift(1/1000))
    torch.testing.assert_close(sch[-2], time_shift(time_shift(torch.tensor(1e-3), 3.0), 3.0), rtol=1e-5, atol=0)
    # DanceGRPO's time input: floor(1000 sigma) / 1000
    assert float(quantize_model_time(torch.tensor(0.98365))) == 0.983


def test_fresh_recompute_gives_ratio_one():
    """Same weights, same inputs, same dtype: rho = 1 exactly (invariant 3)."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(9, 16), torch.nn.Tanh(), torch.nn.Linear(16, 8)).float()
    sde = FlowSDEScheduler(linear_shift_sigmas(6, 3.0), "dance", 0.3)
    x = torch.randn(4, 8, dtype=torch.float32)
    idx = torch.full((4,), 2)

    def inp():
        return torch.cat([x, sde.sigma(idx).float()[:, None]], 1)

    with torch.no_grad():
        out = sde.step(x, net(inp()), idx, generator=torch.Generator().manual_seed(1))
    logp, _ = sde.log_prob(out.prev_sample, x, net(inp()), idx)
    assert torch.equal(torch.exp(logp - out.log_prob), torch.ones(4))


def test_log_prob_is_per_element_mean():
    mean, std = torch.zeros(2, 10), torch.tensor([0.5, 2.0])
    sample = torch.randn(2, 10)
    ref = torch.distributions.Normal(mean, std[:, None]).log_prob(sample).mean(1)
    torch.testing.assert_close(gaussian_log_prob(sample, mean, std), ref)
