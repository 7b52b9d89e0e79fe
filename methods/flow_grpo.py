"""Flow-GRPO (docs/methods/grpo_baselines.md#trained-steps): SDE at every step; trains transitions 0..T-1 in order with
T = floor(timestep_fraction N) (0.99 -> N - 1: the last step is excluded)."""
from __future__ import annotations

import torch

from methods.grpo import GRPO


class FlowGRPO(GRPO):
    def num_trained(self) -> int:
        return max(1, min(self.sde.num_steps - 1, int(self.cfg.timestep_fraction * self.sde.num_steps)))

    def select_train_steps(self, stochastic: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        return torch.arange(self.num_trained()).expand(stochastic.shape[0], -1).clone()
