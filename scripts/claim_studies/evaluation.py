"""The ruler every variant of a study is measured with: deterministic Euler ODE samples from fixed initial noise.

A step's training reward reflects which prompts and noise that step drew, and each method samples its own way
(SDE at every step, at one step, or an ODE), so training rewards of two methods are measured with different rulers.
Here every variant is scored on the same initial latents, with the family's own deterministic sampler: Euler steps
of the probability-flow ODE on the family's sigma grid (its diffusers scheduler as its pipeline sets it up; the
Gaussian toy gets diffusers' unshifted flow-matching grid), never the training sampler. This is the trainer's
held-out evaluation (issue 15) done inside the study until that lands on main, and measures the same thing.
"""

from __future__ import annotations

import torch

from methods.ode_sampler import euler_ode
from methods.time_convention import velocity_am


def family_sigmas(backbone, num_steps: int) -> torch.Tensor:
    """The family's inference grid (float64, ``num_steps + 1`` sigmas ending at 0): :meth:`Backbone.sigmas` with the
    static shift of the family's own scheduler config (unused where the family shifts by resolution, FLUX.1)."""
    scheduler = getattr(backbone, "scheduler", None)
    config = dict(scheduler.config) if scheduler is not None else {}
    return backbone.sigmas(num_steps, float(config.get("flow_shift", config.get("shift", 1.0))))


class FixedNoiseEval:
    """Mean reward of ``per_prompt`` ODE samples of every prompt, from initial latents drawn once (seed ``seed``).

    The latents are drawn when the ruler is built and reused for every call, so two variants (and two points of one
    run) are scored on exactly the same inputs; build one ruler per backbone shape and share it.

    Args:
        trainer: gives the backbone (its current weights) and the reward.
        prompts: evaluation prompts (ignored by the Gaussian toy).
        per_prompt: samples per prompt.
        num_steps: Euler steps of the ODE.
        seed: seed of the initial latents.
        batch: samples per forward pass.
    """

    def __init__(
        self, trainer, prompts: list[str], per_prompt: int, num_steps: int, seed: int = 1234, batch: int = 4096
    ):
        self.prompts = [p for p in prompts for _ in range(per_prompt)]
        self.noise = trainer.backbone.initial_noise(len(self.prompts), torch.Generator().manual_seed(seed)).cpu()
        self.sigmas = family_sigmas(trainer.backbone, num_steps)
        self.batch = batch

    @torch.no_grad()
    def rewards(self, trainer) -> torch.Tensor:
        """Per-sample rewards (float64) of the trainer's current model."""
        bb, out = trainer.backbone, []
        for lo in range(0, len(self.prompts), self.batch):
            prompts = self.prompts[lo : lo + self.batch]
            embeds = bb.encode_prompts(prompts)
            noise = self.noise[lo : lo + self.batch].to(bb.device)
            x = euler_ode(lambda z, t: velocity_am(bb, z, t, embeds), noise, 1.0 - self.sigmas)
            out.append(trainer.reward(bb.decode(x).float(), prompts).double().cpu())
        return torch.cat(out)

    def __call__(self, trainer) -> float:
        return float(self.rewards(trainer).mean())
