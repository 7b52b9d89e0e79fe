"""The 1-D linear-Gaussian testbed of the Flash-GRPO study, in closed form.

The pretrained model is the exact flow-matching velocity of data ``N(mu0, var0)`` (``model=toy_gaussian``; the toy
decodes 3 coordinates, so a sample is 3 independent copies of the 1-D problem) and the reward is
``r = -gamma/2 sum_d (x_d - y)^2`` (``reward=gaussian_tilt``). Every step of a Flash-GRPO rollout, the Euler ODE
steps and the one SDE step at ``k*``, is affine in the state with Gaussian noise, so the final sample is

    x_N = A_k x_0 + B_k xi + C_k,        x_0, xi ~ N(0, 1) independent,

and everything a group of G rollouts sees is known exactly: with ``V = A^2 + B^2`` and ``c = C - y``, per coordinate
``E[r | k] = -gamma/2 (c^2 + V)``, ``Var[r | k] = gamma^2/4 (2 V^2 + 4 V c^2)``, and the part of it left when the
group shares its initial latent, ``E[Var(r | x_0)] = Var[r | k] - gamma^2/4 (2 A^4 + 4 A^2 c^2)``.

Why k* matters here (the *advantage confound* of arXiv:2605.15980): the exact velocity keeps ``E[x_N]`` the same for
every k*, but one Euler-Maruyama step of the marginal-preserving SDE does not keep the variance at a coarse
discretisation, least at the low-noise end of the pool, where the injected noise is never denoised. ``E[r | k*]``
then differs between SDE steps by more than a group's sampling noise, so in a group whose members have different k*
(Flow-GRPO-Fast's window drawn per rank, the "Fast1" ablation) part of every advantage is the timestep, not the
sample. ``lambda(t_k)``, the implicit step weight that rectification removes, comes from the sampler's own code
(:func:`methods.rectification.rectification_factor`), as do the step coefficients (``FlowSDEScheduler.mean_std``).
"""

from __future__ import annotations

import torch

from methods.rectification import rectification_factor
from methods.sde import FlowSDEScheduler
from models.toy_gaussian import gaussian_velocity_am


def final_sample_coefficients(sde: FlowSDEScheduler, mu0: float, var0: float, k: int) -> tuple[float, float, float]:
    """``(A, B, C)`` of ``x_N = A x_0 + B xi + C`` for the exact pretrained velocity of ``N(mu0, var0)``, Euler ODE
    steps everywhere except an SDE step at ``k`` (float64). Each step is affine, so its slope and offset come from
    the sampler evaluated at ``x = 0`` and ``x = 1``."""
    mu, var = torch.tensor([mu0], dtype=torch.float64), torch.tensor([var0], dtype=torch.float64)
    a_total, b_total, c_total = 1.0, 0.0, 0.0
    x = torch.tensor([[0.0], [1.0]], dtype=torch.float64)
    for i in range(sde.num_steps):
        index = torch.tensor([i, i])
        velocity = -gaussian_velocity_am(x, 1.0 - sde.sigma(index), mu, var)  # sigma convention
        mean, std = sde.mean_std(x, velocity, index, stochastic=(i == k))
        slope, offset = float(mean[1, 0] - mean[0, 0]), float(mean[0, 0])
        a_total, b_total, c_total = slope * a_total, slope * b_total, slope * c_total + offset
        if i == k:
            b_total = float(std[0])
    return a_total, b_total, c_total


def analyse(
    sde: FlowSDEScheduler,
    pool: list[int],
    mu0: float,
    var0: float,
    target: float,
    gamma: float = 1.0,
    dims: int = 3,
    group_size: int = 8,
) -> dict:
    """Closed-form statistics of the testbed (see the module docstring).

    Returns per pool step ``k``: ``expected_reward``, ``reward_var``, ``xi_share`` (the fraction of the within-group
    variance left when a group shares its initial latent, i.e. due to the SDE step's noise), ``lam`` (lambda(t_k));
    and ``between_over_noise``: the variance across k* of a group's expected mean reward (uniform k* over the pool)
    over the sampling variance of one group's mean (``Var[r | k] / G``, averaged over k*), and ``lambda_spread``
    (max / min lambda over the pool).
    """
    g2 = gamma**2 / 4.0
    rows = []
    for k in pool:
        a, b, c = final_sample_coefficients(sde, mu0, var0, k)
        off = c - target
        v = a * a + b * b
        var_r = dims * g2 * (2 * v * v + 4 * v * off * off)
        from_x0 = dims * g2 * (2 * a**4 + 4 * a * a * off * off)
        rows.append(
            {
                "k": k,
                "A": a,
                "B": b,
                "C": c,
                "expected_reward": -dims * gamma / 2 * (off * off + v),
                "reward_var": var_r,
                "xi_share": 1.0 - from_x0 / var_r,
                "lam": float(rectification_factor(sde, torch.tensor([k]))[0]),
            }
        )
    expected = torch.tensor([r["expected_reward"] for r in rows], dtype=torch.float64)
    noise = sum(r["reward_var"] for r in rows) / len(rows) / group_size
    lams = [r["lam"] for r in rows]
    return {
        "per_k": rows,
        "between_k_var": float(expected.var(unbiased=False)),
        "group_mean_noise_var": noise,
        "between_over_noise": float(expected.var(unbiased=False)) / noise,
        "lambda_spread": max(lams) / min(lams),
    }
