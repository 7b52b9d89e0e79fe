"""Advantage Weighted Matching (Xue et al., arXiv:2509.25050; code scxue/advantage_weighted_matching @be51372) on
DiffusionNFT's forward-process machinery (methods/diffusion_nft.py). docs/methods/awm.md has the sources and the
choices their code leaves open.

Like DiffusionNFT, the rollout keeps only final latents and their rewards, and the policy is trained by flow matching
on noised copies of them; the loss is the pretraining loss weighted by the advantage. Per step:

1. ``rollout``: CFG-free samples of the trained policy itself (the EMA policy with ``method.off_policy``) with
   ``method.sampler`` on the family's grid; each sample draws its T = ``method.train_timesteps`` trained grid times,
   stratified (:mod:`methods.awm_times`), and a noise seed.
2. ``prepare_update``: DiffusionNFT's advantages (per prompt, global std; their same ``PerPromptStatTracker``).
3. ``backward``: per transformer call of ``method.update_batch`` rows, ``x_t = (1 - sigma) x0 + sigma eps``, the
   reference forward (``kl_beta`` > 0), the EMA policy's forward (``ema_kl_beta`` > 0 or off policy), the trained
   forward and one backward of :func:`methods.awm_loss.awm_loss`.
4. ``end_step``: the EMA policy moves towards the trained weights (DiffusionNFT's lagging copy, their adapter "ema").

Transformer passes per sample and step (:meth:`AWM.passes_per_sample`): N rollout forwards, then per trained time
the trained forward, plus 1 with the reference KL and 1 for the EMA policy, and 1 backward.
"""

from __future__ import annotations

import contextlib
from typing import ContextManager

import torch

from methods.awm_config import AWMConfig
from methods.awm_loss import awm_loss, kl_term, matching_log_prob, scaled_advantages
from methods.awm_times import stratified_steps
from methods.base import Rollout
from methods.diffusion_nft import DiffusionNFT
from methods.update_rows import add_sums


class AWM(DiffusionNFT[AWMConfig]):
    @staticmethod
    def uses_ema_policy(cfg: AWMConfig) -> bool:
        """Whether the update evaluates the EMA policy: for its KL term, or for the old log-likelihood off policy."""
        return cfg.ema_kl_beta > 0 or bool(cfg.off_policy)

    @classmethod
    def passes_per_sample(cls, cfg: AWMConfig) -> tuple[int, int]:
        """The N-step rollout, then per trained time the trained forward, the reference one (``kl_beta`` > 0) and
        the EMA policy's (``ema_kl_beta`` > 0 or off policy), and one backward."""
        t = int(cfg.train_timesteps)
        extra = (1 if cfg.kl_beta > 0 else 0) + (1 if cls.uses_ema_policy(cfg) else 0)
        return int(cfg.sampling_steps) + t * (1 + extra), t

    def num_trained(self) -> int:
        return int(self.cfg.train_timesteps)

    # -- rollout ------------------------------------------------------------------------------------------------
    def sampling_policy(self) -> ContextManager[None]:
        """On policy the trained weights sample (their train.off_policy=False); off policy the EMA policy."""
        return self.old_policy.active() if self.cfg.off_policy else contextlib.nullcontext()

    def draw_train_steps(self, b: int, generator: torch.Generator) -> torch.Tensor:
        u = torch.rand(b, self.num_trained(), generator=generator, dtype=torch.float32)
        cfg = self.cfg
        return stratified_steps(u, int(cfg.sampling_steps), float(cfg.timestep_fraction), cfg.time_sampling)

    # -- loss ---------------------------------------------------------------------------------------------------
    def backward(self, rollout: Rollout, samples: torch.Tensor, update_size: int) -> dict[str, torch.Tensor]:
        """Every (sample, trained time) row of the update, ``method.update_batch`` rows per transformer call: the
        reference and the EMA policy's forwards without gradients, the trained forward and one backward of the
        per-row loss, averaged over the sample's T times (their mean over rows)."""
        bb, cfg = self.backbone, self.cfg
        assert rollout.advantages is not None  # set by prepare_update()
        totals: dict[str, torch.Tensor] = {}
        for c in self.noised_rows(rollout, samples):
            t = c.sigma.float()
            with torch.no_grad():
                v_ref = v_ema = None
                if cfg.kl_beta > 0:
                    with bb.reference():
                        v_ref = bb.velocity(c.xt, t, c.embeds)
                if self.uses_ema_policy(cfg):
                    with self.old_policy.active():
                        v_ema = bb.velocity(c.xt, t, c.embeds)
            v = bb.velocity(c.xt, t, c.embeds)
            log_prob = matching_log_prob(v, c.noise, c.x0, c.sigma, cfg.weighting, float(cfg.ghuber_power))
            if cfg.off_policy:
                assert v_ema is not None
                old = matching_log_prob(v_ema, c.noise, c.x0, c.sigma, cfg.weighting, float(cfg.ghuber_power))
            else:
                old = log_prob.detach()  # their on-policy old log-prob: the same forward, detached
            loss, stats = awm_loss(
                log_prob,
                old,
                scaled_advantages(rollout.advantages[c.rows], float(cfg.adv_clip_max), float(cfg.advantage_max)),
                float(cfg.clip_range),
                kl_term(v, v_ref, c.sigma, cfg.kl_weight) if v_ref is not None else None,
                float(cfg.kl_beta),
                kl_term(v, v_ema, c.sigma, cfg.ema_kl_weight) if v_ema is not None and cfg.ema_kl_beta > 0 else None,
                float(cfg.ema_kl_beta),
            )
            (loss.sum() / (update_size * c.t_count)).backward()
            sums = {"loss": loss.detach().sum(), **{f"awm/{k}": s.sum() for k, s in stats.items()}}
            add_sums(totals, {k: s.detach() / c.t_count for k, s in sums.items()})  # per sample: 1 / T each row
        return totals

    # -- after the updates --------------------------------------------------------------------------------------
    def step_metrics(self) -> dict[str, float]:
        return {"awm/ema_decay": self._decay}
