"""Flash-GRPO (arXiv:2605.15980; docs/methods/flash_grpo.md): one-step GRPO with iso-temporal grouping and temporal
gradient rectification.

What differs from the shared GRPO machinery, and nothing else:

* rollouts are ODE-SDE-ODE: exactly one stochastic step k* per rollout, drawn once per prompt group (keyed by group
  id) from ``sde_index_pool`` (docs/methods/flash_grpo.md#where-the-sde-step-sits); ODE steps are the plain Euler
  step (g = 0);
* only k* is trained, so an update costs one transformer forward + backward per rollout;
* each sample's clipped objective is multiplied by ``w = (1/lambda(t_k*)) / mean(1/lambda)``, the mean taken over
  the whole update across ranks before its micro-batches; the ratio itself is untouched, so clipping decisions do
  not change (docs/methods/flash_grpo.md#temporal-gradient-rectification);
* advantages are keyed by group id (not prompt string), with the official global std
  (docs/methods/flash_grpo.md#advantages-and-loss).
"""

from __future__ import annotations

import torch

from methods.base import Rollout
from methods.flash_diagnostics import FlashDiagnostics
from methods.flash_grpo_config import FlashGRPOConfig
from methods.grpo import GRPO
from methods.rectification import rectification_factor, rectification_weights
from methods.sde_index import default_sde_index_pool, group_sde_indices
from models.backbone import Backbone


class FlashGRPO(GRPO[FlashGRPOConfig]):
    """Flash-GRPO on the shared GRPO rollout, loss and backward (hooks only)."""

    def __init__(self, cfg: FlashGRPOConfig, backbone: Backbone):
        super().__init__(cfg, backbone)
        pool = cfg.sde_index_pool
        self.pool = [int(k) for k in pool] if pool is not None else default_sde_index_pool(self.sde.num_steps)
        self.pool_inv_lambda = 1.0 / rectification_factor(self.sde, torch.tensor(self.pool))
        self.diagnostics = FlashDiagnostics(self.pool)

    # -- config -------------------------------------------------------------------------------------------------
    @classmethod
    def trained_per_sample(cls, cfg: FlashGRPOConfig) -> int:
        return 1  # k*

    # -- rollout: one SDE step per rollout, at the k* of its group ----------------------------------------------
    def group_stochastic_steps(self, group_keys: list, generator: torch.Generator) -> torch.Tensor:
        k = group_sde_indices(
            group_keys, self.pool, self.cfg.sde_index_sampling, bool(self.cfg.iso_temporal), generator
        )
        mask = torch.zeros(len(group_keys), self.sde.num_steps, dtype=torch.bool)
        mask[torch.arange(len(k)), k] = True
        return mask

    def select_train_steps(self, stochastic: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        return stochastic.to(torch.int8).argmax(1, keepdim=True)  # (B, 1): the single SDE step k*

    @torch.no_grad()
    def rollout(self, prompts: list[str], generator: torch.Generator) -> Rollout:
        rollout = super().rollout(prompts, generator)
        k = rollout.train_steps[:, 0]
        # what Flash-GRPO stores per rollout beside the states: k*, the model's time input tau and 1/lambda
        rollout.extras.update(
            sde_index=k, tau=self.model_time(self.sde.sigma(k)), inv_lambda=1.0 / rectification_factor(self.sde, k)
        )
        self.diagnostics.on_rollout(k, rollout.extras["inv_lambda"])
        return rollout

    # -- advantages, keyed by group id (a prompt may repeat across groups) -----------------------------------------
    def advantage_keys(self, rollout: Rollout) -> list:
        return rollout.group_keys

    # -- the 1/lambda weights of every update, fixed before its micro-batches -----------------------------------
    def update_plan(self, rollout: Rollout, generator: torch.Generator) -> list[list[torch.Tensor]]:
        plan = super().update_plan(rollout, generator)
        inv = rollout.extras["inv_lambda"]
        weight, kl_weight = torch.ones_like(inv), torch.ones_like(inv)
        update_of = torch.empty(len(rollout), dtype=torch.long, device=inv.device)
        # every update's host indices on the device in one copy per step, not one per update (a sync each on CUDA)
        joined = [torch.cat(update) for update in plan]
        on_device = torch.cat(joined).to(inv.device).split([len(j) for j in joined])
        for u, idx in enumerate(on_device):
            update_of[idx] = u
            if self.cfg.rectify:
                weight[idx], denom = rectification_weights(inv[idx], self.cfg.weight_norm, self.pool_inv_lambda)
                self.diagnostics.on_weights(weight[idx], denom)
            if self.cfg.kl_beta > 0 and self.cfg.kl_rectify:
                kl_weight[idx], _ = rectification_weights(inv[idx] ** 2, self.cfg.weight_norm, self.pool_inv_lambda**2)
        rollout.extras.update(weight=weight, kl_weight=kl_weight, update_index=update_of)
        return plan

    # -- loss: the shared PPO-clip loss and KL, weighted per sample ------------------------------------------------
    def policy_loss(
        self, rollout: Rollout, samples: torch.Tensor, log_prob: torch.Tensor, old_log_prob: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        loss, stats = super().policy_loss(rollout, samples, log_prob, old_log_prob)
        # w > 0, so max(w a, w b) = w max(a, b): the same samples are clipped and clipped ones keep zero gradient
        return rollout.extras["weight"][samples].to(loss.dtype) * loss, stats

    def kl_penalty(self, rollout: Rollout, samples: torch.Tensor, kl: torch.Tensor) -> torch.Tensor:
        """Flow-GRPO's KL, weighted by (1/lambda^2)/mean with ``kl_rectify`` (its gradient scales as lambda^2)."""
        return self.cfg.kl_beta * rollout.extras["kl_weight"][samples].to(kl.dtype) * kl

    def step_loss(
        self,
        rollout: Rollout,
        samples: torch.Tensor,
        index: torch.Tensor,
        velocity: torch.Tensor,
        ref_velocity: torch.Tensor | None = None,
    ):
        loss, stats = super().step_loss(rollout, samples, index, velocity, ref_velocity)
        self.diagnostics.on_loss(index, stats)
        return loss, stats

    def step_metrics(self) -> dict[str, float]:
        out = super().step_metrics()
        # the first-update drift under Flash-GRPO's own names too (its 1e-3 clip makes it the method's key health
        # figure: docs/methods/flash_grpo.md#metrics)
        for ours, generic in (("clip_frac", "clip_frac"), ("ratio_dev_max", "ratio_dev_max")):
            if f"health/first_update_{generic}" in out:
                out[f"flash/pre_update_{ours}"] = out[f"health/first_update_{generic}"]
        return out | self.diagnostics.flush()
