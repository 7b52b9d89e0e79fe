"""Flow-GRPO (docs/methods/grpo_baselines.md#trained-steps): SDE at every step; trains transitions 0..T-1 in order with
T = floor(timestep_fraction N) (0.99 -> N - 1: the last step is excluded)."""

from __future__ import annotations

import torch

from methods.grpo import GRPO, GRPOConfigT
from methods.trained_steps import flow_trained


class FlowGRPO(GRPO[GRPOConfigT]):
    @classmethod
    def trained_per_sample(cls, cfg: GRPOConfigT) -> int:
        return flow_trained(cfg.timestep_fraction, cfg.sampling_steps)

    def select_train_steps(self, stochastic: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        return torch.arange(self.trained_per_sample(self.cfg)).expand(stochastic.shape[0], -1).clone()
