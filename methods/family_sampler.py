"""The deterministic sampler a model family uses at inference, for the held-out evaluation (docs/evaluation.md).

Evaluation must not use a method's training sampler: DanceGRPO injects SDE noise at every step, Flash-GRPO at one,
the SOC methods sample their own way, so scores of their training samples are measured with different rulers (and
a third-party port of Flash-GRPO saw its scores collapse when its evaluation reused the training SDE). Every method
is therefore evaluated with the same sampler: Euler steps of the probability-flow ODE,
``x_{i+1} = x_i + (sigma_{i+1} - sigma_i) v(x_i, sigma_i)``, on the family's own sigma grid, i.e. its diffusers
scheduler set up as its pipeline sets it (:meth:`models.backbone.Backbone.sigmas`, :mod:`models.sigma_grids`:
FLUX.1 / Qwen-Image custom sigmas with the resolution-dependent shift, SD3.5's static shift, Wan2.1's UniPC flow
sigmas). For FLUX.1, SD3.5 and
Qwen-Image this is ``FlowMatchEulerDiscreteScheduler.step`` of their pipelines; for Wan2.1 it is the Euler stepping
on UniPC's grid that Flow-GRPO and Flash-GRPO evaluate with. Guidance is the backbone's own (its ``velocity``), set
for evaluation with :meth:`models.backbone.Backbone.guidance_override`.
"""

from __future__ import annotations

from typing import Any

import torch

from methods.ode_sampler import euler_ode
from methods.time_convention import velocity_am
from models.backbone import Backbone, PromptEmbeds


def family_sigmas(backbone: Backbone, num_steps: int) -> torch.Tensor:
    """The ``num_steps + 1`` sigmas (float64, last 0) of the family's pipeline (:meth:`Backbone.sigmas`), with the
    family's own shift: its scheduler config's ``shift``, or ``flow_shift`` for UniPC (FLUX.1 / Qwen-Image derive
    theirs from the image size). A backbone without a scheduler (the Gaussian toy) gets diffusers' unshifted
    flow-matching grid."""
    scheduler = getattr(backbone, "scheduler", None)
    config: dict[str, Any] = dict(scheduler.config) if scheduler is not None else {}
    shift = float(config.get("flow_shift", config.get("shift", 1.0)))
    return backbone.sigmas(num_steps, shift)


@torch.no_grad()
def family_ode_sample(
    backbone: Backbone, embeds: PromptEmbeds, noise: torch.Tensor, sigmas: torch.Tensor
) -> torch.Tensor:
    """Final latents of the Euler ODE from ``noise`` (B, *latent) over ``sigmas`` (N + 1,), conditioned on
    ``embeds``; deterministic (the same noise and weights give the same latents)."""
    return euler_ode(lambda x, t: velocity_am(backbone, x, t, embeds), noise, 1.0 - sigmas)
