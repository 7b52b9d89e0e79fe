"""REINFORCE-style GRPO: Flow-GRPO's sampler, advantages, trained steps and updates with the unclipped surrogate
``-A rho``, ``rho = exp(log pi - log pi_old)``. On-policy (the first update of a rollout, rho = 1) its gradient is
REINFORCE's ``-A grad log pi`` with the group-relative baseline; without PPO's clip the later updates of a rollout
are not held near the rollout policy. The method is one hook (:meth:`policy_loss`); docs/extending.md walks through
it as the example of adding a method."""

from __future__ import annotations

import torch

from methods.base import Rollout
from methods.flow_grpo import FlowGRPO
from methods.reinforce_grpo_config import ReinforceGRPOConfig


class ReinforceGRPO(FlowGRPO[ReinforceGRPOConfig]):
    def policy_loss(
        self, rollout: Rollout, samples: torch.Tensor, log_prob: torch.Tensor, old_log_prob: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        log_ratio = log_prob - old_log_prob.to(log_prob.dtype)
        ratio = torch.exp(log_ratio)
        assert rollout.advantages is not None  # prepare_update() sets them
        loss = -rollout.advantages[samples].to(log_prob.dtype) * ratio
        stats = {
            "ratio": ratio.detach(),
            "clipped": torch.zeros_like(ratio.detach()),  # nothing is ever clipped
            "approx_kl": 0.5 * log_ratio.detach() ** 2,
        }
        return loss, stats
