"""MixGRPO (arXiv:2507.21802; docs/methods/mix_grpo.md): ODE sampling with a sliding window of SDE steps that moves
over training (:mod:`methods.mix_grpo_window`); only the window's steps inject noise and are trained, every other
step is the exact ODE Euler step (g = 0). The SDE step, its log-prob, the group advantages and the PPO-clipped loss
are the shared GRPO machinery's (Flow-GRPO's kernel, as the authors' ``--flow_grpo_sampling``).

The training iteration is this method's state (``state_dict``): checkpoints keep it, so a resumed run trains the
window the uninterrupted run would have."""

from __future__ import annotations

import torch

from methods.flow_grpo import FlowGRPO
from methods.mix_grpo_config import MixGRPOConfig
from methods.mix_grpo_window import window_steps
from models.backbone import Backbone


class MixGRPO(FlowGRPO[MixGRPOConfig]):
    def __init__(self, cfg: MixGRPOConfig, backbone: Backbone):
        super().__init__(cfg, backbone)
        self.iteration = torch.zeros((), dtype=torch.int64)  # training iterations finished (resume loads it in place)

    @classmethod
    def trained_per_sample(cls, cfg: MixGRPOConfig) -> int:
        """The first iteration's window: ``window_size`` steps below ``window_stop`` (later windows near the stop
        are shorter, as the reference's)."""
        return len(window_steps(cfg, 0))

    def window(self) -> list[int]:
        """The steps the current iteration samples with the SDE and trains."""
        return window_steps(self.cfg, int(self.iteration))

    def stochastic_steps(self, n: int, generator: torch.Generator) -> torch.Tensor:
        mask = torch.zeros(n, self.sde.num_steps, dtype=torch.bool)
        mask[:, self.window()] = True
        return mask

    def select_train_steps(self, stochastic: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Every sample trains the window's steps in order (the reference loops ``for _ in train_timesteps``)."""
        cols = stochastic[0].nonzero().flatten()
        return cols.expand(stochastic.shape[0], -1).clone()

    def end_step(self, step: int) -> None:
        """The window advances once per training iteration, as the reference's ``update_iteration()``."""
        self.iteration.fill_(step + 1)

    def step_metrics(self) -> dict[str, float]:
        window = window_steps(self.cfg, int(self.iteration) - 1)
        return {**super().step_metrics(), "mix/window_start": float(window[0] if window else -1)}

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"mix_grpo.iteration": self.iteration}
