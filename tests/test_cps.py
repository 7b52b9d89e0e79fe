"""Flow-GRPO's coefficient-preserving step (``noise_kernel=cps``, docs/cps.md) against upstream's own code, and the
closed forms that build on ``FlowSDEScheduler`` (``velocity_coef``, ``log_prob_precision``, the KL) under it."""

from __future__ import annotations

import math

import pytest
import torch

from conftest import compose
from flash_toys import IdentityBackbone, flash_method, sd3_euler
from launcher.validate import validate
from methods.sde import FlowSDEScheduler, cps_log_prob
from rewardflow.errors import ConfigError

A = 0.8  # upstream's noise_level in every CPS config
N = 10  # SD3.5-M Fast: num_steps 10
SHAPE = (3, 16, 4, 4)


# ------------------------------------------------------------------------------------- upstream, transcribed
def upstream_cps_step(self, model_output, timestep, sample, noise_level=0.7, prev_sample=None, variance_noise=None):
    """``sde_step_with_logprob(..., sde_type="cps")`` of yifan123/flow_grpo, file
    flow_grpo/diffusers_patch/sd3_sde_with_logprob.py at commit 54809b5fcf4d3930d2a17fa553928704bd0b719e, lines
    11-93 (the ``cps`` branch is lines 70-86), transcribed with only the ``sde`` branch and ``return_sqrt_dt`` left
    out and ``randn_tensor(...)`` replaced by the ``variance_noise`` argument. ``self`` is a diffusers
    ``FlowMatchEulerDiscreteScheduler`` after ``set_timesteps``."""
    model_output = model_output.float()
    sample = sample.float()
    if prev_sample is not None:
        prev_sample = prev_sample.float()

    step_index = [self.index_for_timestep(t) for t in timestep]
    prev_step_index = [step + 1 for step in step_index]
    sigma = self.sigmas[step_index].view(-1, *([1] * (len(sample.shape) - 1)))
    sigma_prev = self.sigmas[prev_step_index].view(-1, *([1] * (len(sample.shape) - 1)))

    std_dev_t = sigma_prev * math.sin(noise_level * math.pi / 2)  # sigma_t in paper
    pred_original_sample = sample - sigma * model_output  # predicted x_0 in paper
    noise_estimate = sample + model_output * (1 - sigma)  # predicted x_1 in paper
    prev_sample_mean = pred_original_sample * (1 - sigma_prev) + noise_estimate * torch.sqrt(
        sigma_prev**2 - std_dev_t**2
    )

    if prev_sample is None:
        prev_sample = prev_sample_mean + std_dev_t * variance_noise

    # remove all constants
    log_prob = -((prev_sample.detach() - prev_sample_mean) ** 2)

    # mean along all but batch dimension
    log_prob = log_prob.mean(dim=tuple(range(1, log_prob.ndim)))
    return prev_sample, log_prob, prev_sample_mean, std_dev_t


def upstream_case(steps: list[int], seed: int = 0):
    """SD3.5-M's scheduler as Flow-GRPO sets it up (shift 3, 10 steps), fp32 states, velocities and noise for one
    row per step index in ``steps``, and our scheduler on the same sigmas."""
    sched = sd3_euler(N)
    g = torch.Generator().manual_seed(seed)
    x, v, v_new, noise = (torch.randn(len(steps), *SHAPE[1:], generator=g) for _ in range(4))
    ours = FlowSDEScheduler(sched.sigmas.double(), "cps", A)
    return sched, ours, torch.tensor(steps), x, v, v_new, noise


@pytest.mark.parametrize("steps", [[0, 4, 8], [1, 5, 9]])  # 9 is the last step: sigma_next = 0, std = 0
def test_step_mean_std_and_log_prob_match_upstream(steps):
    sched, ours, idx, x, v, v_new, noise = upstream_case(steps)
    timesteps = sched.timesteps[idx]
    prev, log_prob, mean, std = upstream_cps_step(sched, v, timesteps, x, noise_level=A, variance_noise=noise)
    out = ours.step(x, v, idx, noise=noise)
    assert out.prev_sample.dtype == torch.float32
    for name, got, want in (
        ("prev_sample", out.prev_sample, prev),
        ("mean", out.mean, mean),
        ("std", out.std, std.flatten()),
        ("log_prob", out.log_prob, log_prob),
    ):
        err = float((got.double() - want.double()).abs().max())
        assert err <= 1e-6, f"{name}: max |ours - upstream| = {err:.2e}"

    # training: the stored sample re-scored under a new velocity, as upstream's compute_log_prob does
    _, log_prob_new, mean_new, _ = upstream_cps_step(sched, v_new, timesteps, x, noise_level=A, prev_sample=prev)
    got_lp, got_mean = ours.log_prob(out.prev_sample, x, v_new, idx)
    assert float((got_lp - log_prob_new).abs().max()) <= 1e-6
    assert float((got_mean - mean_new).abs().max()) <= 1e-6
    assert float((log_prob_new - log_prob).abs().max()) > 1e-3  # the case exercises a real change


def test_log_prob_convention_is_upstreams_not_the_gaussian_density():
    """-mean ||x' - mu||^2: no 1/(2 std^2), no log std, no constant; ratio 1 on a fresh recompute."""
    _, ours, idx, x, v, _, noise = upstream_case([2, 3, 6])
    out = ours.step(x.double(), v.double(), idx, noise=noise.double())
    std = out.std[:, None, None, None]
    torch.testing.assert_close(out.log_prob, -((std * noise.double()) ** 2).flatten(1).mean(1), rtol=1e-12, atol=0)
    gaussian = torch.distributions.Normal(out.mean, std).log_prob(out.prev_sample).flatten(1).mean(1)
    assert float((gaussian - out.log_prob).abs().min()) > 0.1
    log_prob, _ = ours.log_prob(out.prev_sample, x.double(), v.double(), idx)
    assert torch.equal(torch.exp(log_prob - out.log_prob), torch.ones(3, dtype=torch.float64))


# ---------------------------------------------------------------------------------- closed forms, float64
float64 = pytest.mark.usefixtures("float64")


@float64
def test_mean_is_coefficient_preserving():
    """Writing x = (1 - sigma) x0 + sigma x1 and v = x1 - x0 exactly, the mean is (1 - s') x0 + sqrt(s'^2 - std^2) x1:
    the squares of the coefficients of x1 and of the noise sum to s'^2, the flow's own noise level at the next step."""
    sde = FlowSDEScheduler(sd3_euler(N).sigmas.double(), "cps", A)
    idx = torch.arange(N - 1)
    g = torch.Generator().manual_seed(1)
    x0, x1 = torch.randn(N - 1, 8, generator=g), torch.randn(N - 1, 8, generator=g)
    s, s_next = sde.sigma(idx)[:, None], sde.sigmas[idx + 1][:, None]
    mean, std = sde.mean_std((1 - s) * x0 + s * x1, x1 - x0, idx)
    x1_weight = torch.sqrt(s_next**2 - std[:, None] ** 2)
    torch.testing.assert_close(mean, (1 - s_next) * x0 + x1_weight * x1, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(x1_weight**2 + std[:, None] ** 2, s_next**2, rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(std, s_next[:, 0] * math.sin(A * math.pi / 2), rtol=1e-15, atol=0)


@float64
def test_velocity_coef_and_precision_are_the_autograd_derivatives():
    """kappa = d mu / d v (stochastic and deterministic rows) and d log_prob / d mu = c (x' - mu) / D with c = 2."""
    sde = FlowSDEScheduler(sd3_euler(N).sigmas.double(), "cps", A)
    idx = torch.tensor([0, 3, 5, 8])
    stochastic = torch.tensor([True, False, True, True])
    g = torch.Generator().manual_seed(2)
    x, xi = torch.randn(4, 6, generator=g), torch.randn(4, 6, generator=g)
    v = torch.randn(4, 6, generator=g, requires_grad=True)
    mean, _ = sde.mean_std(x, v, idx, stochastic)
    (grad,) = torch.autograd.grad(mean.sum(), v)
    kappa = sde.velocity_coef(idx, stochastic)
    torch.testing.assert_close(grad, kappa[:, None].expand(4, 6), rtol=1e-12, atol=1e-15)
    delta = sde.sigmas[idx + 1] - sde.sigma(idx)
    torch.testing.assert_close(kappa[1], delta[1], rtol=1e-12, atol=0)  # deterministic row: Euler
    assert (kappa[2:] < delta[2:]).all()  # noise takes weight off x1_hat (no effect at sigma = 1)

    out = sde.step(x, v.detach(), idx, noise=xi)
    mu = out.mean.clone().requires_grad_(True)
    (grad_mu,) = torch.autograd.grad(cps_log_prob(out.prev_sample, mu).sum(), mu)
    c = sde.log_prob_precision(idx)
    torch.testing.assert_close(grad_mu, c[:, None] * (out.prev_sample - mu.detach()) / 6, rtol=1e-12, atol=1e-15)


@float64
def test_std_is_g_sqrt_minus_delta_ode_rows_are_euler_and_the_last_step_is_defined():
    sigmas = sd3_euler(N).sigmas.double()
    sde = FlowSDEScheduler(sigmas, "cps", A)
    idx = torch.tensor([0, 2, 5, N - 1])
    g = torch.Generator().manual_seed(3)
    x, v = torch.randn(4, 5, generator=g), torch.randn(4, 5, generator=g)
    _, std = sde.mean_std(x, v, idx)
    torch.testing.assert_close(
        std, sde.diffusion_coef(idx) * torch.sqrt(sigmas[idx] - sigmas[idx + 1]), rtol=1e-12, atol=0
    )
    out = sde.step(x, v, idx, stochastic=torch.tensor([False, True, False, True]))
    euler = x + (sigmas[idx + 1] - sigmas[idx])[:, None] * v
    assert torch.equal(out.prev_sample[[0, 2]], euler[[0, 2]])
    assert torch.isnan(out.log_prob[[0, 2]]).all()
    # the last step: sigma_N = 0, so std = 0 and the sample is the mean; upstream's log-prob there is 0, not NaN
    assert float(out.std[3]) == 0 and float(out.log_prob[3]) == 0.0
    torch.testing.assert_close(out.prev_sample[3], euler[3], rtol=1e-12, atol=1e-12)


@float64
def test_kl_to_the_reference_is_upstreams():
    """Upstream divides mean ||mu - mu_ref||^2 by 2 std_dev_t^2 with CPS's std_dev_t the step's std: the exact KL,
    whatever method.kl_exact says."""
    for kl_exact in ("false", "true"):
        method = flash_method(
            IdentityBackbone(dtype=torch.float64),
            ["noise_kernel=cps", f"eta={A}", "kl_beta=0.04", f"kl_exact={kl_exact}"],
        )
        idx = torch.tensor([0, 1, 4])
        g = torch.Generator().manual_seed(4)
        x, v, v_ref = (torch.randn(3, 2, 3, 4, 4, generator=g) for _ in range(3))
        mean, std = method.sde.mean_std(x, v, idx)
        ref_mean, _ = method.sde.mean_std(x, v_ref, idx)
        upstream = ((mean - ref_mean) ** 2).flatten(1).mean(1) / (2 * std**2)
        torch.testing.assert_close(method.kl_term(mean, ref_mean, idx), upstream, rtol=1e-12, atol=0)


# ------------------------------------------------------------------------------------------------- config
@pytest.mark.parametrize("method", ["dance_grpo", "flow_grpo", "flow_grpo_fast", "jagg", "flash_grpo"])
def test_every_grpo_method_accepts_cps(method):
    cfg = compose([f"method={method}", "method.noise_kernel=cps", "method.eta=0.8"])
    validate(cfg)


def test_fast_presets_use_cps_as_upstream_does():
    """flow_grpo config/grpo.py @54809b5: the SD3.5-M and FLUX.1 Fast configs set sde_type="cps", noise_level 0.8."""
    fast = compose(["method=flow_grpo_fast"]).method
    jagg_fast = compose(["method=jagg", "method.base=flow_grpo_fast"]).method
    assert (fast.noise_kernel, fast.eta) == ("cps", 0.8) and (jagg_fast.noise_kernel, jagg_fast.eta) == ("cps", 0.8)
    assert compose(["method=flow_grpo"]).method.noise_kernel == "flow"


@pytest.mark.parametrize(
    "overrides,key",
    [
        (["method=flow_grpo_fast", "method.eta=1.2"], "method.eta"),
        (
            [
                "method=flash_grpo",
                "method.noise_kernel=cps",
                "method.eta=0.8",
                "method.kl_beta=0.01",
                "method.kl_rectify=true",
            ],
            "method.kl_rectify",
        ),
    ],
)
def test_bad_cps_configs_fail_naming_the_key(overrides, key):
    with pytest.raises(ConfigError, match=key):
        validate(compose(overrides))
