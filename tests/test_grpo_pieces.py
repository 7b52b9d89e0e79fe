"""docs/methods/grpo_baselines.md#tested-invariants, items 4-7: clip masks, both advantage definitions, the Fast
window, KL."""

from __future__ import annotations

import torch

from methods.advantages import compute_advantages
from methods.flow_grpo_fast import FlowGRPOFast
from methods.flow_grpo_fast_config import FlowGRPOFastConfig
from methods.losses import kl_to_reference, ppo_clip_loss
from methods.schedule import linear_shift_sigmas
from methods.schedule_config import Schedule
from methods.sde import FlowSDEScheduler


def test_group_advantages_match_dancegrpo_definition():
    g = torch.Generator().manual_seed(0)
    r = torch.rand(12, generator=g, dtype=torch.float64)
    keys = [k for k in range(3) for _ in range(4)]
    adv = compute_advantages(r, keys, "group", clip=5.0).values
    for k in range(3):
        grp = r[4 * k : 4 * k + 4]
        ref = (grp - grp.mean()) / (grp.std() + 1e-8)  # torch .std(): unbiased, as DanceGRPO
        torch.testing.assert_close(adv[4 * k : 4 * k + 4], ref)
        assert abs(float(adv[4 * k : 4 * k + 4].mean())) < 1e-12
        assert abs(float(adv[4 * k : 4 * k + 4].std()) - 1) < 1e-6
    const = compute_advantages(torch.full((4,), 0.3, dtype=torch.float64), [0] * 4, "group")
    assert torch.equal(const.values, torch.zeros(4, dtype=torch.float64)) and const.zero_std_frac == 1.0


def test_prompt_advantages_match_flow_grpo_stat_tracker():
    r = torch.tensor([1.0, 2.0, 4.0, 0.0, 10.0, 11.0], dtype=torch.float64)
    prompts = ["a", "a", "a", "b", "b", "b"]
    adv = compute_advantages(r, prompts, "prompt", global_std=False, clip=100.0).values
    for sl in (slice(0, 3), slice(3, 6)):
        grp = r[sl]
        torch.testing.assert_close(adv[sl], (grp - grp.mean()) / (grp.std(unbiased=False) + 1e-4))
    glob = compute_advantages(r, prompts, "prompt", global_std=True, clip=100.0).values
    for sl in (slice(0, 3), slice(3, 6)):
        torch.testing.assert_close(glob[sl], (r[sl] - r[sl].mean()) / (r.std(unbiased=False) + 1e-4))
    # prompts are grouped by string, wherever they sit in the batch
    mixed = compute_advantages(r[[0, 3, 1, 4, 2, 5]], ["a", "b"] * 3, "prompt", clip=100.0).values
    torch.testing.assert_close(mixed, adv[[0, 3, 1, 4, 2, 5]])


def test_advantages_are_clamped():
    r = torch.tensor([0.0] * 99 + [1.0], dtype=torch.float64)
    adv = compute_advantages(r, [0] * 100, "group", clip=5.0).values
    assert float(adv.max()) == 5.0


def test_clip_masks_zero_the_gradient_outside_the_band():
    eps = 1e-4
    logp = torch.tensor([0.0, 2e-4, -2e-4, 2e-4, -2e-4, 5e-5], dtype=torch.float64, requires_grad=True)
    adv = torch.tensor([1.0, 1.0, 1.0, -1.0, -1.0, 1.0], dtype=torch.float64)
    loss, stats = ppo_clip_loss(logp, torch.zeros(6, dtype=torch.float64), adv, eps)
    (grad,) = torch.autograd.grad(loss.sum(), logp)
    assert grad[1] == 0  # A > 0, rho > 1 + eps
    assert grad[4] == 0  # A < 0, rho < 1 - eps
    for k in (0, 2, 3, 5):  # inside the band or on the side the clip does not bind: -A rho
        torch.testing.assert_close(grad[k], -adv[k] * torch.exp(logp[k].detach()))
    assert stats["clipped"].tolist() == [0, 1, 1, 1, 1, 0]


def test_kl_is_zero_for_equal_policies_and_positive_otherwise():
    mean = torch.randn(3, 8)
    g = torch.tensor([0.3, 0.5, 0.7])
    assert torch.equal(kl_to_reference(mean, mean.clone(), g), torch.zeros(3))
    assert (kl_to_reference(mean, mean + 0.1 * torch.randn(3, 8), g) > 0).all()
    exact = kl_to_reference(mean, mean + 0.1, g, exact=True, delta=torch.tensor([-0.1, -0.2, -0.5]))
    torch.testing.assert_close(exact, kl_to_reference(mean, mean + 0.1, g) / torch.tensor([0.1, 0.2, 0.5]))


def fast(window_size=2, window_range=(0, 5), n=10):
    cfg = FlowGRPOFastConfig(
        window_size=window_size, window_range=list(window_range), sampling_steps=n, schedule=Schedule.linear_shift
    )
    return FlowGRPOFast(cfg, None)  # the linear_shift grid needs no model


def test_fast_window_start_range_and_trained_steps():
    m = fast(3, (1, 6))
    starts = set()
    for s in range(200):
        mask = m.stochastic_steps(4, torch.Generator().manual_seed(s))
        cols = mask[0].nonzero().flatten()
        assert (mask == mask[0]).all()  # one window for the whole sampling batch
        assert len(cols) == 3 and cols.tolist() == list(range(int(cols[0]), int(cols[0]) + 3))
        starts.add(int(cols[0]))
        assert m.select_train_steps(mask, None).tolist() == [cols.tolist()] * 4
    assert starts == {1, 2, 3}  # start in [lo, hi - size]


def test_fast_window_size_zero_is_full_sde_but_last():
    m = fast(0, (0, 5), n=8)
    mask = m.stochastic_steps(2, torch.Generator().manual_seed(0))
    assert mask[0].tolist() == [True] * 7 + [False]
    assert m.select_train_steps(mask, None).shape == (2, 7)


def test_steps_outside_window_equal_euler():
    sde = FlowSDEScheduler(linear_shift_sigmas(6, 3.0), "flow", 0.8)
    m = fast(2, (0, 4), n=6)
    mask = m.stochastic_steps(3, torch.Generator().manual_seed(3))
    x = torch.randn(3, 5)
    for i in range(6):
        v = torch.randn(3, 5)
        out = sde.step(x, v, torch.full((3,), i), stochastic=mask[:, i])
        if not mask[0, i]:
            torch.testing.assert_close(
                out.prev_sample, x + (sde.sigmas[i + 1] - sde.sigmas[i]).float() * v, rtol=0, atol=1e-6
            )
            assert out.std.eq(0).all()
        x = out.prev_sample


def test_video_rewards_score_frames_and_reduce():
    from rewards.base_config import FrameReduce
    from rewards.color import ColorReward
    from rewards.color_config import ColorRewardConfig

    reward = ColorReward(ColorRewardConfig(frame_reduce=FrameReduce.topk_mean, frame_topk_frac=0.5))
    video = torch.zeros(2, 4, 3, 8, 8)
    video[:, :2, 0] = 1.0  # first two frames pure red
    frames = ColorReward(ColorRewardConfig())(video.flatten(0, 1), ["a red car"] * 8).view(2, 4)
    torch.testing.assert_close(reward(video, ["a red car"] * 2), frames.topk(2, 1).values.mean(1))
    torch.testing.assert_close(ColorReward(ColorRewardConfig())(video, ["a red car"] * 2), frames.mean(1))
    assert float(reward(video, ["a red car"] * 2)[0]) == 1.0
