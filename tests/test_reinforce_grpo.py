"""method=reinforce_grpo, the example method of docs/extending.md: its one hook, the unclipped surrogate. Everything
else (composition, validation, a training run on every tiny twin with the declared pass counts) the existing tests
learn from the component."""

from __future__ import annotations

import torch

from methods.base import Rollout
from methods.flow_grpo import FlowGRPO
from methods.reinforce_grpo import ReinforceGRPO
from methods.reinforce_grpo_config import ReinforceGRPOConfig
from methods.schedule_config import Schedule


def test_on_policy_gradient_is_reinforce_and_nothing_is_clipped(float64):
    cfg = ReinforceGRPOConfig(group_size=2, prompts_per_step=2, sampling_steps=4, schedule=Schedule.linear_shift)
    reinforce, ppo = ReinforceGRPO(cfg, None), FlowGRPO(cfg, None)  # the linear_shift grid needs no model
    advantages = torch.tensor([1.0, -1.0, 2.0, -0.5])
    rollout = Rollout(
        prompts=["a", "a", "b", "b"], group_keys=[0, 0, 1, 1], embeds=None, images=None, advantages=advantages
    )
    old = torch.tensor([0.0, 0.1, -0.2, 0.3])
    log_prob = (old + torch.tensor([0.0, 0.0, 0.5, -0.5])).requires_grad_()  # rows 0-1 on policy, 2-3 far off it
    samples = torch.arange(4)

    loss, stats = reinforce.policy_loss(rollout, samples, log_prob, old)
    (grad,) = torch.autograd.grad(loss.sum(), log_prob)
    ratio = torch.exp(log_prob.detach() - old)
    torch.testing.assert_close(grad, -advantages * ratio)  # d(-A rho)/d log pi = -A rho
    torch.testing.assert_close(grad[:2], -advantages[:2])  # on policy: REINFORCE's -A
    assert stats["clipped"].sum() == 0 and torch.equal(stats["ratio"], ratio)

    clipped_loss, clipped_stats = ppo.policy_loss(rollout, samples, log_prob, old)
    (clipped_grad,) = torch.autograd.grad(clipped_loss.sum(), log_prob)
    assert torch.equal(clipped_grad[2:], torch.zeros(2)) and clipped_stats["clipped"][2:].sum() == 2
    assert bool((grad[2:] != 0).all())  # where PPO's clip stops the gradient
