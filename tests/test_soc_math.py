"""The shared SOC math of Adjoint Matching and EAM in float64 (docs/methods/eam.md#tested-invariants, items 1-8)."""

from __future__ import annotations

import math

import pytest
import torch

from methods.bridge_kernel import BridgeKernel
from methods.closed_form_adjoint import closed_form_adjoint, corrected_terminal_grad, velocity_target
from methods.lean_adjoint import LeanAdjointSolver
from methods.linear_base import LinearMemorylessBase
from methods.memoryless import MemorylessSchedule, denoised, score_from_velocity
from methods.terminal_score import smoothing_std, tweedie_naive_score, tweedie_shrink_score
from methods.time_convention import (
    DEFAULT_CONVENTION,
    SigmaConvention,
    register_time_convention,
    time_convention,
    velocity_am,
)
from models.toy_gaussian import ToyGaussianBackbone, gaussian_score, gaussian_velocity_am
from models.toy_gaussian_config import ToyGaussianModelConfig
from rewards.gaussian_tilt import GaussianTiltReward
from rewards.gaussian_tilt_config import GaussianTiltRewardConfig, TiltKind

pytestmark = pytest.mark.usefixtures("float64")  # the documented invariants, in float64 (conftest)


def toy(mu0, var0, dim=3, **kw) -> ToyGaussianBackbone:
    return ToyGaussianBackbone(ToyGaussianModelConfig(dim=dim, mu0=mu0, var0=var0, **kw), keep_reference=True)


def pre_velocity(bb: ToyGaussianBackbone):
    """``v_pre(x, t)`` of the toy's frozen reference through the time adapter."""
    emb = bb.encode_prompts(["toy"])

    def v(x, t):
        with bb.reference():
            return velocity_am(bb, x, t, PromptRepeat(emb, x.shape[0]))

    return v


def PromptRepeat(emb, n):
    return emb.select([0] * n)


T = torch.tensor([0.05, 0.3, 0.5, 0.7, 0.95], dtype=torch.float64)


# ----------------------------------------------------------------------------------- invariant 1: schedule identities
def test_memoryless_schedule_identities():
    s = MemorylessSchedule(offset=0.0)
    assert torch.allclose(s.sigma(T) ** 2, 2 * (1 - T) / T, rtol=1e-14)
    assert torch.allclose(s.kappa(T), 1 / T, rtol=1e-14)
    assert torch.allclose(s.loss_weight(T), 4 / s.sigma(T) ** 2, rtol=1e-14)
    h = MemorylessSchedule(offset=1 / 40)
    assert torch.allclose(h.sigma(T) ** 2, 2 * (1 - T + 1 / 40) / (T + 1 / 40), rtol=1e-14)
    assert math.isfinite(float(h.sigma(torch.zeros(1)))) and float(h.sigma(torch.ones(1))) > 0
    # the memoryless drift 2v - kappa x is the general drift v + sigma^2/2 s with the score recovered from v
    mu, var = torch.tensor([0.5, -1.0, 2.0]), torch.tensor([0.6, 0.2, 1.5])
    x = torch.randn(5, 3, generator=torch.Generator().manual_seed(0))
    v = gaussian_velocity_am(x, T, mu, var)
    score = score_from_velocity(v, x, T)
    assert torch.allclose(score, gaussian_score(x, T, mu, var), atol=1e-12)
    assert torch.allclose(s.drift(x, v, T), v + (s.sigma(T) ** 2 / 2)[:, None] * score, atol=1e-12)
    # Tweedie: E[X1 | X_t = x] from the score, both ways
    x1_hat = denoised(x, v, T)
    assert torch.allclose(score, (T[:, None] * x1_hat - x) / (1 - T[:, None]) ** 2, atol=1e-12)
    # control <-> velocity
    vb = torch.randn(5, 3)
    u = s.control(v, vb, T)
    assert torch.allclose(s.velocity_from_control(vb, u, T), v, atol=1e-14)


@pytest.mark.parametrize("c", [0.5, 1.0, math.sqrt(1.7), 2.0])
def test_linear_base_variance_ode_and_velocity(c):
    """m' = 2 D_c m + sigma^2 (the base marginal N(0, m_t)); D_c = 2 v_c / x - kappa; D_1 closed form."""
    base, s = LinearMemorylessBase(c), MemorylessSchedule(0.0)
    t = torch.linspace(0.01, 0.99, 99)
    assert (base.m_dot(t) - (2 * base.drift_coef(t) * base.m(t) + s.sigma(t) ** 2)).abs().max() < 1e-12
    assert torch.allclose(base.drift_coef(t), 2 * base.velocity_coef(t) - s.kappa(t), atol=1e-12)
    # v_c is the rectified-flow velocity of N(0, c^2)
    x = torch.randn(99, 3, generator=torch.Generator().manual_seed(1))
    assert torch.allclose(
        base.velocity(x, t), gaussian_velocity_am(x, t, torch.zeros(3), torch.full((3,), c * c)), atol=1e-12
    )
    if c == 1.0:
        assert torch.allclose(base.drift_coef(t), (2 * t**2 - 1) / (t * (2 * t**2 - 2 * t + 1)), atol=1e-12)
        assert float(base.drift_coef(torch.ones(1))) == pytest.approx(1.0)


# ---------------------------------------------------------------------------- invariant 3: closed-form adjoint
def rk4_backward_adjoint(d_coef, t_end: float, n: int = 20000) -> float:
    """Integrate a' = -D(t) a from a(1) = 1 down to t_end with classical RK4 (scalar, float64)."""
    a, t = 1.0, 1.0
    h = (1.0 - t_end) / n
    f = lambda tt, aa: -float(d_coef(torch.tensor([tt]))) * aa  # noqa: E731
    for _ in range(n):  # backward: dt = -h
        k1 = f(t, a)
        k2 = f(t - h / 2, a - h / 2 * k1)
        k3 = f(t - h / 2, a - h / 2 * k2)
        k4 = f(t - h, a - h * k3)
        a -= h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        t -= h
    return a


def test_closed_form_adjoint_equals_integrated_lean_adjoint_ode():
    """Invariant 3's table (c^2 = 1.7): Phi(1, t) = c^2 t / m_t against a numerically integrated a' = -D_c a."""
    base = LinearMemorylessBase(math.sqrt(1.7))
    expected = {0.05: 0.093741, 0.3: 0.793157, 0.7: 1.289274, 0.95: 1.050919}
    for t, ref in expected.items():
        phi = float(base.propagator(torch.tensor([t])))
        assert phi == pytest.approx(ref, abs=1e-6)
        assert rk4_backward_adjoint(base.drift_coef, t, n=4000) == pytest.approx(phi, rel=1e-9)
    # vector form: a(t) = Phi(1, t) grad g, per sample
    g = torch.randn(5, 3)
    assert torch.allclose(closed_form_adjoint(base, g, T), base.propagator(T)[:, None] * g)


def test_am_vjp_lean_adjoint_solver_reproduces_the_closed_form():
    """Invariant 3's cross-check: AM's VJP-based solver, run through a backbone whose pretrained velocity *is* v_c (data
    N(0, c^2)), so that its memoryless drift is D_c x, reproduces Phi(1, t) grad g up to O(h)."""
    c2 = 1.7
    base = LinearMemorylessBase(math.sqrt(c2))
    bb = toy(0.0, c2)
    v = pre_velocity(bb)
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(2))  # states do not matter: the drift is linear
    a1 = torch.randn(4, 3, generator=torch.Generator().manual_seed(3))
    solver = LeanAdjointSolver(MemorylessSchedule(offset=0.0))
    t0 = 0.05
    errors = []
    for k in (100, 200, 400):
        ts = t0 + (1 - t0) * torch.arange(k + 1) / k

        def vjp(i, a, ts=ts):
            xi = x.clone().requires_grad_(True)
            with torch.enable_grad():
                out = v(xi, ts[i].expand(4))
                return torch.autograd.grad(out, xi, grad_outputs=a)[0]

        adj = solver.solve(vjp, ts, a1)
        exact = closed_form_adjoint(base, a1[:, None].expand(-1, k + 1, -1).reshape(-1, 3), ts.repeat(4)).view(
            4, k + 1, 3
        )
        errors.append(float((adj - exact).abs().max()))
    assert errors[-1] < 2e-2
    assert errors[0] / errors[1] == pytest.approx(2.0, rel=0.1) and errors[1] / errors[2] == pytest.approx(2.0, rel=0.1)


def test_am_lean_adjoint_converges_at_first_order_on_the_offset_schedule():
    """The lean adjoint on AM's own grid (t_k = k / K, offset h = 1/40) of a 1-D Gaussian pretrained law N(0.5, 0.6),
    through the toy's frozen velocity, against an RK4 reference of a' = -D(t) a with the analytic
    D(t) = 2 V_t' / (2 V_t) - 1 / (t + h), V_t = t^2 var0 + (1 - t)^2: the relative error at t = 0.25 is 1.5 % at
    K = 40 and halves with every doubling of K (explicit Euler, first order). Taking each step's Jacobian at its left
    point (X_k, t_k), as this solver did before, gave 15 % at K = 40 (30 / 7.5 / 3.8 % at K = 20 / 80 / 160;
    docs/methods/eam.md#the-lean-adjoint-step)."""
    mu0, var0, offset, t_check = 0.5, 0.6, 1 / 40, 0.25
    bb = toy(mu0, var0, dim=1)
    v = pre_velocity(bb)
    s = MemorylessSchedule(offset=offset)

    def d_coef(t):  # d/dx of the memoryless base drift 2 v_pre - kappa x (the toy's velocity is affine in x)
        vt, dvt = t**2 * var0 + (1 - t) ** 2, 2 * t * var0 - 2 * (1 - t)
        return 2 * dvt / (2 * vt) - s.kappa(t)

    reference = rk4_backward_adjoint(d_coef, t_check, n=4000)
    x = torch.randn(2, 1, generator=torch.Generator().manual_seed(5))  # states do not matter: the drift is affine
    a1 = torch.tensor([[1.0], [-2.0]])
    errors = []
    for k in (20, 40, 80, 160):
        ts = s.grid(k)

        def vjp(i, a, ts=ts):
            xi = x.clone().requires_grad_(True)
            with torch.enable_grad():
                return torch.autograd.grad(v(xi, ts[i].expand(2)), xi, grad_outputs=a)[0]

        adj = LeanAdjointSolver(s).solve(vjp, ts, a1)
        at = adj[:, round(t_check * k)] / a1  # the propagator Phi(1, 0.25), per sample
        assert torch.allclose(at[0], at[1], rtol=1e-12) and adj.dtype == torch.float64
        errors.append(abs(float(at[0, 0]) / reference - 1))
    assert errors[1] <= 0.15 / 2, errors  # issue 25's acceptance: at most half of the left-point scheme's 15 %
    assert errors[1] == pytest.approx(0.0151, abs=5e-4), errors
    for coarse, fine in zip(errors, errors[1:]):
        assert coarse / fine == pytest.approx(2.0, rel=0.05), errors  # first order: each doubling halves the error


# ----------------------------------------------------------------------------------- invariant 2: kernel / marginal
def test_kernel_has_the_base_marginal_and_the_base_bridge():
    c2 = 1.7
    base = LinearMemorylessBase(math.sqrt(c2))
    gen = torch.Generator().manual_seed(4)
    n = 20000
    # exact moments: t^2 c^2 + (1 - t)^2 = m_t
    mean, std = BridgeKernel.mean_std(torch.ones(5, 1), T)
    assert torch.allclose(T**2 * c2 + std**2, base.m(T), atol=1e-14)
    assert torch.allclose(mean.flatten(), T)
    # Monte Carlo: X_1 ~ N(0, c^2), X_t ~ q_t(. | X_1) has variance m_t
    x1 = math.sqrt(c2) * torch.randn(n, 1, generator=gen)
    for t in (0.3, 0.6):
        xt = BridgeKernel.sample(x1, torch.full((n,), t), torch.randn(n, 1, generator=gen))
        assert float(xt.var()) == pytest.approx(float(base.m(torch.tensor([t]))), rel=0.03)
    # simulate the linear base SDE itself (Euler–Maruyama from t = 1e-3): terminal law N(0, c^2), X_0 independent of
    # X_1 (memoryless), and X_t | X_1 has slope t and residual variance (1 - t)^2 -- the kernel's bridge
    s = MemorylessSchedule(0.0)
    steps, t_start = 1000, 1e-3
    ts = t_start + (1 - t_start) * torch.arange(steps + 1) / steps
    x0 = torch.randn(n, 1, generator=gen)
    x, snaps = x0 * math.sqrt(float(base.m(ts[:1]))), {}
    drift, diffusion = base.drift_coef(ts).tolist(), s.sigma(ts).tolist()
    noise = torch.randn(steps, n, 1, generator=gen)
    for i in range(steps):
        dt = float(ts[i + 1] - ts[i])
        x = x + (dt * drift[i]) * x + (math.sqrt(dt) * diffusion[i]) * noise[i]
        for snap in (0.3, 0.6):
            if abs(float(ts[i + 1]) - snap) < 0.5 / steps:
                snaps[snap] = x.clone()
    assert float(x.var()) == pytest.approx(c2, rel=0.03)
    assert abs(float(torch.corrcoef(torch.cat([x0, x], 1).T)[0, 1])) < 0.03
    for t, xt in snaps.items():
        slope = float(((xt - xt.mean()) * (x - x.mean())).mean() / x.var())
        resid = float((xt - slope * x).var())
        assert slope == pytest.approx(t, abs=0.02)
        assert resid == pytest.approx((1 - t) ** 2, rel=0.05)


# --------------------------------------------------------------------------------- invariant 8: terminal score
@pytest.mark.parametrize("delta,expected", [(0.05, 3.79), (0.02, 3.967), (0.005, 3.998)])
def test_delta_shrink_terminal_score_is_the_smoothed_analytic_score(delta, expected):
    """Data N(3, 0.05): the Tweedie shrink estimate through the frozen toy model equals the score of the smoothed law
    N(3, 0.05 + tau^2), tau = delta / (1 - delta), to machine precision; the naive one is biased (invariant 8)."""
    mu0, var0 = 3.0, 0.05
    bb = toy(mu0, var0)
    x1 = torch.tensor([[2.8, 2.8, 2.8], [3.0, 3.0, 3.0], [3.2, 3.2, 3.2]])
    tau2 = smoothing_std(delta) ** 2
    smoothed = -(x1 - mu0) / (var0 + tau2)
    shrink = tweedie_shrink_score(pre_velocity(bb), x1, delta)
    assert torch.allclose(shrink, smoothed, atol=1e-10)
    assert float(shrink[0, 0]) == pytest.approx(expected, abs=5e-3) and float(shrink[1, 0]) == pytest.approx(
        0, abs=1e-9
    )
    naive = tweedie_naive_score(pre_velocity(bb), x1, delta)
    assert float((naive - smoothed).abs().max()) > 0.25
    # the smoothed score tends to the exact one (4, 0, -4) as delta -> 0
    assert float((shrink - (-(x1 - mu0) / var0)).abs().max()) < 2 * tau2 / var0**2 * 0.2 + 1e-9


# ------------------------------------------------------------------------ invariants 4-5: the regression target
def test_tilted_gaussian_reference_numbers_and_linear_sign():
    r = GaussianTiltReward(GaussianTiltRewardConfig(kind=TiltKind.quadratic, gamma=1.0, target=[2.0]))
    mu, var = r.tilted_gaussian(torch.tensor([0.5]), torch.tensor([0.6]), 0.8, channel_of_dim=torch.tensor([0]))
    assert float(mu) == pytest.approx(0.98649, abs=1e-5) and float(var) == pytest.approx(0.40541, abs=1e-5)
    lin = GaussianTiltReward(GaussianTiltRewardConfig(kind=TiltKind.linear, direction=[1.0, -2.0, 0.5]))
    mu, var = lin.tilted_gaussian(torch.zeros(3), torch.full((3,), 0.6), 0.5)
    assert torch.allclose(mu, torch.tensor([0.3, -0.6, 0.15])) and torch.allclose(var, torch.full((3,), 0.6))
    # reward gradient on decoded toy images
    bb = toy(0.0, 1.0)
    x = torch.randn(4, 3, requires_grad=True)
    (g,) = torch.autograd.grad(r(bb.decode(x), ["p"] * 4).sum(), x)
    assert torch.allclose(g, -(x.detach() - 2.0))


def test_eam_target_is_unbiased_at_the_optimum():
    """Invariant 5: with X_1 ~ p* and X_t ~ q_t, E[v_tgt | X_t] is the flow-matching velocity v* of p* -- the fixed
    point of the EAM regression is the tilted law (1-D regression slope/intercept, 4e5 samples)."""
    mu0, var0, lam, gamma, y = 0.5, 0.6, 0.8, 1.0, 2.0
    var_s = 1 / (1 / var0 + lam * gamma)
    mu_s = var_s * (mu0 / var0 + lam * gamma * y)
    base = LinearMemorylessBase(1.0)
    gen = torch.Generator().manual_seed(5)
    n = 400000
    x1 = mu_s + math.sqrt(var_s) * torch.randn(n, 1, generator=gen)
    grad_r = -gamma * (x1 - y)
    score_pre = -(x1 - mu0) / var0
    grad_g = corrected_terminal_grad(base, x1, grad_r, score_pre, lam)
    for t in (0.1, 0.4, 0.8, 0.97):
        tt = torch.full((n,), t)
        xt = BridgeKernel.sample(x1, tt, torch.randn(n, 1, generator=gen))
        tgt = velocity_target(base, xt, tt, grad_g)
        a = torch.stack([xt.flatten(), torch.ones(n)], 1)
        slope, icpt = torch.linalg.lstsq(a, tgt).solution.flatten().tolist()
        # v*(x) = mu* + V'/(2V) (x - t mu*)
        vt = t**2 * var_s + (1 - t) ** 2
        k = (2 * t * var_s - 2 * (1 - t)) / (2 * vt)
        assert slope == pytest.approx(k, abs=0.01)
        assert icpt == pytest.approx(mu_s - k * t * mu_s, abs=0.01)


def test_eam_target_is_pointwise_exact_for_a_gaussian_base_model():
    """Invariant 5, pointwise: p_pre = N(0, c^2), lambda = 0, v_theta = v_pre = v_c and the analytic terminal score:
    the target equals v_c(X_t) exactly (zero loss); the Tweedie estimate leaves an O(tau^2) residual."""
    c = 1.3
    base = LinearMemorylessBase(c)
    gen = torch.Generator().manual_seed(6)
    x1 = c * torch.randn(64, 3, generator=gen)
    t = torch.rand(64, generator=gen)
    xt = BridgeKernel.sample(x1, t, torch.randn(64, 3, generator=gen))
    grad_g = corrected_terminal_grad(base, x1, torch.zeros_like(x1), -x1 / c**2, 0.0)
    assert torch.allclose(velocity_target(base, xt, t, grad_g), base.velocity(xt, t), atol=1e-14)
    delta = 0.02
    est = tweedie_shrink_score(pre_velocity(toy(0.0, c * c)), x1, delta)
    resid = velocity_target(
        base, xt, t, corrected_terminal_grad(base, x1, torch.zeros_like(x1), est, 0.0)
    ) - base.velocity(xt, t)
    tau2 = smoothing_std(delta) ** 2
    assert float(resid.abs().max()) < 2 * tau2 / c**4 * float(x1.abs().max()) + 1e-12


def test_am_adjoint_sign_points_the_control_along_the_reward():
    """Invariant 6: a(1) = -lambda grad r; the regression target for u is -sigma a, along +grad r."""
    s = MemorylessSchedule()
    grad_r = torch.tensor([[1.0, -2.0, 0.5]])
    a1 = -3.0 * grad_r
    u_target = -s.sigma(torch.tensor([0.9]))[:, None] * a1
    assert bool(((u_target * grad_r) > 0).all())


# ----------------------------------------------------------------------------- invariant 7: convention adapter
def test_time_convention_adapter():
    mu, var = torch.tensor([0.5, -0.5, 0.0]), torch.tensor([0.6, 0.6, 1.0])
    bb = toy(mu.tolist(), var.tolist())
    emb = bb.encode_prompts(["p"] * 5)
    x = torch.randn(5, 3, generator=torch.Generator().manual_seed(7))
    assert time_convention(bb) is DEFAULT_CONVENTION
    v = velocity_am(bb, x, T, emb)
    assert torch.allclose(v, gaussian_velocity_am(x, T, mu, var), atol=1e-14)  # the analytic v
    assert torch.allclose(v, -bb.velocity(x, 1 - T, emb), atol=0)  # = -model(x, sigma = 1 - t)
    assert torch.allclose(
        score_from_velocity(v, x, T), -(x - T[:, None] * mu) / (T[:, None] ** 2 * var + (1 - T[:, None]) ** 2)
    )
    # one diffusers Euler step x + (sigma_next - sigma) out equals x + h v_AM
    sigma, sigma_next = 1 - T, 1 - T - 0.01
    out = bb.velocity(x, sigma, emb)
    assert torch.allclose(
        x + (sigma_next - sigma)[:, None] * out, DEFAULT_CONVENTION.euler_step(x, v, T, T + 0.01), atol=1e-14
    )

    # a family overrides the adapter by registering it (class or dotted name); subclasses inherit it
    class Shifted(SigmaConvention):
        def velocity(self, backbone, x, t, embeds):
            return 2.0 * super().velocity(backbone, x, t, embeds)

    class FamilyBackbone(ToyGaussianBackbone):
        pass

    class SubFamilyBackbone(FamilyBackbone):
        pass

    conv = Shifted()
    register_time_convention(f"{FamilyBackbone.__module__}.{FamilyBackbone.__qualname__}", conv)
    fam = SubFamilyBackbone(ToyGaussianModelConfig(dim=3, mu0=mu.tolist(), var0=var.tolist()))
    assert time_convention(fam) is conv
    assert torch.allclose(velocity_am(fam, x, T, emb), 2 * v)
    assert time_convention(bb) is DEFAULT_CONVENTION
