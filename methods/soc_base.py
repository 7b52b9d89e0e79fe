"""What Adjoint Matching and EAM share as methods of the one trainer loop (docs/methods/eam.md).

Both treat reward fine-tuning as stochastic optimal control: sample without gradients, take the reward's gradient
at the endpoint (``score``, the reward phase: decode with gradients, reward, ``d r / d latent``), build regression
targets for the control (``prepare_update``), and regress the fine-tuned velocity onto them (``backward``). The
control is always the fine-tuned velocity minus a base velocity (:meth:`MemorylessSchedule.control`); the frozen
pretrained model is ``backbone.reference()`` (LoRA: the same module with the adapter disabled; full fine-tuning: a
frozen copy). Every velocity goes through the backbone family's time adapter (:mod:`methods.time_convention`).

Loss conventions (both methods, docs/methods/eam.md#loss-conventions): the squared norm of the control residual is
**summed** over latent elements (``loss_reduction=sum``; ``mean`` divides by the number of elements) and **averaged**
over a sample's loss timesteps; the optional per-sample clip caps that loss at ``loss_clip * reward_scale^2`` (AM's
LCT = 1.6 lambda^2); clipped samples contribute no gradient. The update is the mean over samples.
"""

from __future__ import annotations

from typing import TypeVar

import torch

from methods.base import Method, Rollout
from methods.chunking import chunked_velocity, display_copy
from methods.memoryless import MemorylessSchedule
from methods.soc_base_config import LossReduction, SOCConfig
from methods.time_convention import time_convention
from methods.update_rows import rows_per_call
from models.backbone import Backbone, PromptEmbeds

#: the config class of a stochastic-optimal-control method (adjoint matching, EAM)
SOCConfigT = TypeVar("SOCConfigT", bound=SOCConfig)


class SOCMethod(Method[SOCConfigT]):
    """Base class of the adjoint methods (needs a differentiable reward and the frozen pretrained model)."""

    requires_differentiable_reward = True

    def __init__(self, cfg: SOCConfigT, backbone: Backbone):
        super().__init__(cfg, backbone)
        self.schedule = MemorylessSchedule(float(cfg.sigma_offset))
        self.convention = time_convention(backbone)
        self.reward_scale = float(cfg.reward_scale)
        self._step_metrics: dict[str, float] = {}

    # -- config -------------------------------------------------------------------------------------------------
    @classmethod
    def needs_reference(cls, cfg: SOCConfigT) -> bool:
        return True

    # -- velocities in AM time ----------------------------------------------------------------------------------
    def velocity(self, x: torch.Tensor, t: torch.Tensor, embeds: PromptEmbeds) -> torch.Tensor:
        """Fine-tuned ``v_theta(x, t)`` (AM time; gradients flow if enabled)."""
        return self.convention.velocity(self.backbone, x, t, embeds)

    def pretrained_velocity(self, x: torch.Tensor, t: torch.Tensor, embeds: PromptEmbeds) -> torch.Tensor:
        """Frozen ``v_pre(x, t)`` (the adapter disabled, or the frozen copy)."""
        with self.backbone.reference():
            return self.convention.velocity(self.backbone, x, t, embeds)

    def chunks(self, n: int) -> list[torch.Tensor]:
        """Sample indices per transformer call of ``method.update_batch`` rows, CFG rows counted (the memory bound of
        every batched pass: rollout, VJPs, decode)."""
        per_call = rows_per_call(self.cfg.update_batch, self.backbone)
        return list(torch.arange(n, device=self.backbone.device).split(per_call))  # device indices: nothing to move

    def loss_calls(self, samples: torch.Tensor, rows_per_sample: int) -> list[torch.Tensor]:
        """``samples`` in groups of whole samples whose ``rows_per_sample`` loss rows fill a call of
        ``method.update_batch`` rows (at least one sample: the per-sample loss clip needs all of a sample's terms
        in one call; docs/performance.md#batched-trained-steps)."""
        per_call = rows_per_call(self.cfg.update_batch, self.backbone)
        return list(samples.split(max(1, per_call // max(1, rows_per_sample))))

    @torch.no_grad()
    def velocity_batched(self, x: torch.Tensor, t: torch.Tensor, embeds: PromptEmbeds) -> torch.Tensor:
        """Fine-tuned velocity without gradients, ``method.rollout_chunk`` rows per transformer call."""
        return chunked_velocity(self.backbone, x, t, embeds, self.cfg.rollout_chunk, self.velocity).to(x.dtype)

    @torch.no_grad()
    def pretrained_velocity_batched(self, x: torch.Tensor, t: torch.Tensor, embeds: PromptEmbeds) -> torch.Tensor:
        """Frozen velocity without gradients, ``method.rollout_chunk`` rows per transformer call."""
        return chunked_velocity(self.backbone, x, t, embeds, self.cfg.rollout_chunk, self.pretrained_velocity).to(
            x.dtype
        )

    # -- rollout helpers ----------------------------------------------------------------------------------------
    def expand_prompts(self, prompts: list[str]) -> tuple[list[str], list[int]]:
        g = int(self.cfg.group_size)
        return [p for p in prompts for _ in range(g)], [k for k in range(len(prompts)) for _ in range(g)]

    # -- the reward phase: rewards and their gradient at the endpoint ------------------------------------------
    def reward_and_grad(self, reward: torch.nn.Module, latents: torch.Tensor, prompts: list[str]):
        """``(r (B,), d r / d latents, images)``: decode with gradients, score, differentiate, ``method.decode_chunk``
        images at a time; the images kept (``keep_images``) are 8-bit host copies for the image grids."""
        rewards = torch.empty(latents.shape[0], dtype=torch.float32, device=latents.device)
        grads = torch.empty_like(latents)
        images: list[torch.Tensor] = []
        for idx in torch.arange(latents.shape[0]).split(int(self.cfg.decode_chunk)):
            idx = idx.to(latents.device)
            x = latents[idx].detach().requires_grad_(True)
            with torch.enable_grad():
                img = self.backbone.decode(x)
                r = reward(img, [prompts[i] for i in idx.tolist()])
                (g,) = torch.autograd.grad(r.sum(), x)
            rewards[idx], grads[idx] = r.detach().float(), g.to(latents.dtype)
            if self.keep_images:
                images.append(display_copy(img))
        return rewards, grads, (torch.cat(images) if images else None)

    def set_rewards(
        self, rollout: Rollout, rewards: torch.Tensor, grads: torch.Tensor, images: torch.Tensor | None
    ) -> None:
        rollout.rewards, rollout.images = rewards, images
        rollout.extras["reward_grad"] = grads
        norm = grads.flatten(1).norm(dim=1)
        self._step_metrics = {
            "soc/reward_grad_norm": float(norm.mean()),
            "soc/scaled_reward_grad_norm": float(self.reward_scale * norm.mean()),
        }

    # -- updates ------------------------------------------------------------------------------------------------
    def squared_norm(self, residual: torch.Tensor) -> torch.Tensor:
        """Per-row squared norm of a residual, summed (or averaged) over latent elements, in >= fp32."""
        r = residual.flatten(1).to(torch.promote_types(residual.dtype, torch.float32))
        sq = (r**2).sum(1)
        return sq / r.shape[1] if self.cfg.loss_reduction == LossReduction.mean else sq

    def finish_loss(self, per_sample: torch.Tensor, update_size: int) -> dict[str, torch.Tensor]:
        """Clip per-sample losses, backpropagate their sum over ``update_size`` (the update's mean), return the
        trainer's statistic sums as device tensors."""
        threshold = float(self.cfg.loss_clip) * self.reward_scale**2
        clipped = torch.zeros_like(per_sample, dtype=torch.bool)
        loss = per_sample
        if threshold > 0:
            clipped = per_sample.detach() > threshold
            loss = torch.where(clipped, torch.full_like(per_sample, threshold), per_sample)
        (loss.sum() / update_size).backward()
        return {"loss": per_sample.detach().sum(), "soc/loss_clipped_frac": clipped.sum()}

    def step_metrics(self) -> dict[str, float]:
        return dict(self._step_metrics)
