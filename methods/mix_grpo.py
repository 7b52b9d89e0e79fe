"""MixGRPO (arXiv:2507.21802; docs/methods/mix_grpo.md): ODE sampling with a sliding window of SDE steps that moves
over training (:mod:`methods.mix_grpo_window`); only the window's steps inject noise and are trained, every other
step is the exact ODE Euler step (g = 0). The SDE step, its log-prob, the group advantages and the PPO-clipped loss
are the shared GRPO machinery's (Flow-GRPO's kernel, as the authors' ``--flow_grpo_sampling``).

MixGRPO-Flash (``method.ode_solver=dpm_solver_pp2``, ``method=mix_grpo_flash``) samples the steps after the window
with DPM-Solver++ (2M) on a compressed grid (:mod:`methods.mix_grpo_flash`): fewer transformer evaluations per
rollout, the same trained steps.

The training iteration is this method's state (``state_dict``): checkpoints keep it, so a resumed run trains the
window the uninterrupted run would have."""

from __future__ import annotations

import torch

from methods.flow_grpo import FlowGRPO
from methods.mix_grpo_config import MixGRPOConfig, OdeSolver
from methods.mix_grpo_flash import flash_sigmas, post_window_ode
from methods.mix_grpo_window import post_window_points, rollout_steps, window_steps
from models.backbone import Backbone, PromptEmbeds


class MixGRPO(FlowGRPO[MixGRPOConfig]):
    def __init__(self, cfg: MixGRPOConfig, backbone: Backbone):
        super().__init__(cfg, backbone)
        self.iteration = torch.zeros((), dtype=torch.int64)  # training iterations finished (resume loads it in place)

    @classmethod
    def trained_per_sample(cls, cfg: MixGRPOConfig) -> int:
        """The first iteration's window: ``window_size`` steps below ``window_stop`` (later windows near the stop
        are shorter, as the reference's)."""
        return len(window_steps(cfg, 0))

    @classmethod
    def passes_per_sample(cls, cfg: MixGRPOConfig) -> tuple[int, int]:
        """The first iteration's rollout (N steps; with MixGRPO-Flash the window's end plus the compressed grid's
        steps, :func:`methods.mix_grpo_window.rollout_steps`), then a forward and a backward per trained step."""
        trained = cls.trained_per_sample(cfg)
        return rollout_steps(cfg, 0) + trained * (2 if cfg.kl_beta > 0 else 1), trained

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

    def sde_steps_taken(self, stochastic: torch.Tensor) -> int:
        """MixGRPO-Flash: the SDE sampler stops after the window's last step."""
        if self.cfg.ode_solver == OdeSolver.euler:
            return self.sde.num_steps
        return self.window()[-1] + 1

    def finish_rollout(
        self, x: torch.Tensor, x0: torch.Tensor, embeds: PromptEmbeds, taken: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """DPM-Solver++ (2M) after the window, on the compressed grid (:mod:`methods.mix_grpo_flash`)."""
        last = taken - 1
        grid = flash_sigmas(self.sigmas, last, post_window_points(self.cfg, last), self.cfg.shift)
        return post_window_ode(
            self.backbone,
            x,
            x0,
            grid,
            taken,
            embeds,
            self.model_time,
            self.rollout_rows,
            str(self.cfg.dpm_solver_type),
        )

    def end_step(self, step: int) -> None:
        """The window advances once per training iteration, as the reference's ``update_iteration()``."""
        self.iteration.fill_(step + 1)

    def step_metrics(self) -> dict[str, float]:
        window = window_steps(self.cfg, int(self.iteration) - 1)
        return {**super().step_metrics(), "mix/window_start": float(window[0] if window else -1)}

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"mix_grpo.iteration": self.iteration}
