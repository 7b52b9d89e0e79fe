"""JAGG's math in float64 on toy velocity models (docs/methods/jagg.md#tested-invariants, items 1-6, 9-11), through
the real method code."""

from __future__ import annotations

import copy

import pytest
import torch

from jagg_toys import F64, MLP, Affine, cos, flat, gradient, make_jagg, rel_err, sde_rollout
from methods.jagg import JAGG
from methods.jagg_groups import GroupLayout
from methods.jagg_weights import aggregate, endpoint_weights, index_weights, time_weights
from methods.schedule import linear_shift_sigmas

D = 6


# -------------------------------------------------------------------------------- invariants 1-2: upstream gradients
CPS = {"noise_kernel": "cps", "eta": 0.8}  # Flow-GRPO's coefficient-preserving step (docs/cps.md)


@pytest.mark.parametrize("kernel", [{}, CPS], ids=["dance", "cps"])
def test_upstream_gradients_match_the_closed_form_and_the_clip_masks(kernel):
    """s_j = -(A rho 1[clip not binding] / Z) (kappa / D) c (x_{i+1} - mu), at any rho
    (docs/methods/jagg.md#one-jagg-group), with c = 1 / std^2 for the Gaussian log-prob and c = 2 for CPS's
    (``log_prob_precision``)."""
    method = make_jagg(Affine(D), D, clip_range=1e-3, **kernel)
    rollout = sde_rollout(method, b=6, seed=1)
    eps = 1e-3
    # rows 0-1: inside the band; 2: A > 0, rho > 1 + eps; 3: A < 0, rho < 1 - eps (both clipped: s = 0);
    # 4: A > 0, rho < 1 - eps and 5: A < 0, rho > 1 + eps (the clip does not bind: s = -A rho dl/dv)
    rollout.advantages = torch.tensor([1.0, -0.5, 1.0, -1.0, 2.0, -2.0], dtype=F64)
    shift = torch.tensor([0.0, 0.0, -3 * eps, 3 * eps, 3 * eps, -3 * eps], dtype=F64)
    rollout.log_probs = rollout.log_probs + shift[:, None]  # rho = exp(-shift) at every step
    samples, steps = torch.arange(6), rollout.train_steps[:, :4]
    velocities = [method.velocity_at(rollout, samples, steps[:, j]).detach() for j in range(4)]
    norm = 7
    s, loss, stats = method.upstream_gradients(rollout, samples, steps, velocities, norm)
    for j in range(4):
        index = steps[:, j]
        x, x_next = rollout.latents[samples, index], rollout.latents[samples, index + 1]
        mean, _ = method.sde.mean_std(x, velocities[j], index)
        rho = torch.exp(-shift)
        binding = ((rollout.advantages > 0) & (rho > 1 + eps)) | ((rollout.advantages < 0) & (rho < 1 - eps))
        kappa, c = method.sde.velocity_coef(index), method.sde.log_prob_precision(index)
        closed = (-(rollout.advantages * rho * (~binding)) / norm * kappa * c / D)[:, None] * (x_next - mean)
        torch.testing.assert_close(s[j], closed, rtol=1e-10, atol=1e-14)
        assert s[j][2].abs().max() == 0 and s[j][3].abs().max() == 0
        assert (s[j][[0, 1, 4, 5]].abs().sum(1) > 0).all()
    assert stats["clipped"].view(4, 6)[:, [2, 3, 4, 5]].eq(1).all()


# ---------------------------------------------------------------------------------------- invariant 3: weights
def test_t_weights_on_the_paper_schedule_and_aggregation_algebra():
    sigmas = linear_shift_sigmas(21, 3.0)
    for g in range(5):
        alpha = time_weights(sigmas[4 * g : 4 * g + 4, None])[:, 0]
        assert alpha[0] == 0 and alpha[-1] == 1 and (alpha.diff() > 0).all() and ((alpha >= 0) & (alpha <= 1)).all()
        # not index weights on a shifted schedule (docs/methods/jagg.md#one-jagg-group: ~[0, .31, .64, 1] ...
        # [0, .29, .62, 1])
        assert 0.28 < float(alpha[1]) < 0.32 and 0.61 < float(alpha[2]) < 0.65
    alpha = time_weights(sigmas[:4, None].expand(4, 3))
    s = torch.randn(4, 3, 5, dtype=F64)
    for ablation in ("none", "nearest_endpoint"):
        base, corr = aggregate(s, *endpoint_weights(alpha, ablation))
        torch.testing.assert_close(base + corr, s.sum(0), rtol=0, atol=1e-14)
    base, corr = aggregate(s, *endpoint_weights(alpha, "endpoints_only"))
    assert torch.equal(base, s[0]) and torch.equal(corr, s[3])
    hard = endpoint_weights(alpha, "nearest_endpoint")[1][:, 0]
    assert hard.tolist() == [0, 0, 1, 1]
    torch.testing.assert_close(index_weights(4, 1)[:, 0], torch.tensor([0, 1 / 3, 2 / 3, 1], dtype=F64))


# ------------------------------------------------------------------------------------ invariant 4: W = 2 exact
def test_window_two_is_exact_for_a_nonlinear_model():
    method = make_jagg(MLP(D), D, window=2)
    rollout = sde_rollout(method, b=3, seed=2)
    jagg, exact = gradient(method, rollout, exact=False), gradient(method, rollout, exact=True)
    assert rel_err(flat(jagg), flat(exact)) < 1e-12


# --------------------------------------------------------------------------------- invariant 5: Theorem 1
@pytest.mark.parametrize("kernel", [{}, CPS], ids=["dance", "cps"])
@pytest.mark.parametrize("off_policy", [False, True])
def test_theorem1_affine_model_with_states_on_the_t_weighted_line(off_policy, kernel):
    """JAGG = exact gradient to rounding; with the prototype's index weights it is not (Theorem 1, d). The sampler's
    kernel only changes the s_j, not the Jacobians JAGG interpolates, so CPS keeps the theorem."""
    net = Affine(D)
    old = None
    if off_policy:  # rho != 1 and some clipped rows: s_j carries the current ratios and masks, still exact
        old = copy.deepcopy(net)
        with torch.no_grad():
            old.c.add_(0.02 * torch.randn(D, dtype=F64, generator=torch.Generator().manual_seed(5)))
    method = make_jagg(net, D, clip_range=0.2, **kernel)
    rollout = sde_rollout(method, b=4, seed=3, collinear=True, old_policy=old)
    exact = flat(gradient(method, rollout, exact=True))
    assert rel_err(flat(gradient(method, rollout, exact=False)), exact) < 1e-12
    method.cfg.alpha = "index"
    assert rel_err(flat(gradient(method, rollout, exact=False)), exact) > 1e-5


# ------------------------------------------------------------------------- invariant 6: z-independent Jacobian
def test_z_independent_parameters_are_exact_on_a_genuine_sde_path():
    """On a real SDE path only the Jacobian wrt A depends on z: u and c come out exact, A does not (Theorem 1, b-c)."""
    method = make_jagg(Affine(D), D)
    rollout = sde_rollout(method, b=4, seed=4)
    jagg, exact = gradient(method, rollout, exact=False), gradient(method, rollout, exact=True)
    for name in ("u", "c"):
        assert rel_err(jagg[name], exact[name]) < 1e-12, name
    assert rel_err(jagg["A"], exact["A"]) > 1e-6
    assert cos(flat(jagg), flat(exact)) > 0.99


# ------------------------------------------------------------------------- invariant 10: normalisation parity
def test_normalisation_parity_over_accumulated_micro_batches_and_an_optimizer_step():
    """Two micro-batches accumulated into one update: same .grad as the baseline (same Z), same AdamW step."""
    method = make_jagg(Affine(D), D)
    rollout = sde_rollout(method, b=4, seed=6, collinear=True)
    net = method.backbone.transformer
    params = {}
    for exact in (True, False):
        start = copy.deepcopy(net.state_dict())
        opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
        opt.zero_grad(set_to_none=True)
        for mb in (torch.tensor([0, 1]), torch.tensor([2, 3])):
            if exact:
                super(JAGG, method).backward(rollout, mb, 4)  # the baseline's backward
            else:
                method.backward(rollout, mb, 4)
        opt.step()
        params[exact] = flat({k: v.detach().clone() for k, v in net.named_parameters()})
        net.load_state_dict(start)
    assert rel_err(params[False], params[True]) < 1e-12


# ---------------------------------------------------------------------------------- invariant 11: nonlinear
def test_jagg_beats_the_endpoints_only_ablation_on_an_mlp():
    method = make_jagg(MLP(D, seed=1), D)
    rollout = sde_rollout(method, b=4, seed=7)
    exact = flat(gradient(method, rollout, exact=True))
    cosines = {}
    for ablation in ("none", "nearest_endpoint", "endpoints_only"):
        method.cfg.ablation = ablation
        cosines[ablation] = cos(flat(gradient(method, rollout, exact=False)), exact)
    assert cosines["none"] > cosines["endpoints_only"], cosines


# --------------------------------------------------------------------------------------- invariant 9: routing
def test_routing_g5_jagg_frac_06_gives_groups_0_to_2():
    lay = GroupLayout(num_steps=20, window=4, jagg_frac=0.6)
    assert lay.num_groups == 5 and [g for g in range(5) if lay.is_jagg(g)] == [0, 1, 2]
    assert lay.backward_rows_per_sample() == 14  # 3 x 2 + 2 x 4: 30% fewer than 20
    assert GroupLayout(20, 4, 0.0).num_jagg == 0 and GroupLayout(20, 4, 1.0).num_jagg == 5
    assert GroupLayout(200, 2, 0.29).num_jagg == 29  # floor, robust to 0.29 x 100 = 28.99999...
    tail = GroupLayout(9, 4, 0.6)
    assert (tail.num_groups, tail.tail, tail.num_jagg) == (2, 1, 1)
    with pytest.raises(ValueError):
        GroupLayout(9, 4, 0.6, remainder="error")


def test_group_assignment_keeps_order_and_subsamples_whole_groups():
    trainable = torch.arange(10, 30).expand(3, -1)  # M = 20 trainable steps 10..29
    lay = GroupLayout(20, 4, 0.6)
    full = lay.assign(trainable)
    assert torch.equal(full.steps, trainable) and full.groups == (0, 1, 2, 3, 4)
    assert [g for g, _ in full.slots()] == [0, 1, 2, 3, 4] and full.slots()[1][1] == slice(4, 8)
    seen = set()
    for seed in range(30):
        chosen = lay.choose_groups(0.4, torch.Generator().manual_seed(seed))
        assert len(chosen) == 2 and list(chosen) == sorted(set(chosen))  # floor(0.4 x 5) whole groups, in order
        seen.add(chosen)
        part = lay.assign(trainable, chosen)
        assert part.slot_sizes == (4, 4) and part.groups == chosen
        expected = torch.cat([torch.arange(10 + 4 * g, 14 + 4 * g) for g in chosen])
        assert all(torch.equal(row, expected) for row in part.steps)
    assert len(seen) > 5
    assert lay.choose_groups(0.01) == (0,) or len(lay.choose_groups(0.01)) == 1  # at least one group
    tail = GroupLayout(9, 4, 0.6).assign(torch.arange(9).expand(2, -1))
    assert tail.slot_sizes == (4, 4, 1) and tail.groups == (0, 1, 2)
