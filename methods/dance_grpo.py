"""DanceGRPO (docs/methods/grpo_baselines.md#trained-steps): SDE at every step, and each sample trains its own random
subset of floor(timestep_fraction (N - 1)) of its N - 1 trainable transitions (the last transition is never trained)."""

from __future__ import annotations

import torch

from methods.grpo import GRPO, GRPOConfigT
from methods.trained_steps import dance_trained


class DanceGRPO(GRPO[GRPOConfigT]):
    train_steps_before_sampling = False  # its random subsets are drawn after the noise of the rollout

    @classmethod
    def trained_per_sample(cls, cfg: GRPOConfigT) -> int:
        return dance_trained(cfg.timestep_fraction, cfg.sampling_steps)

    def select_train_steps(self, stochastic: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        b, n = stochastic.shape
        perms = torch.stack([torch.randperm(n - 1, generator=generator) for _ in range(b)])
        return perms[:, : self.trained_per_sample(self.cfg)]
