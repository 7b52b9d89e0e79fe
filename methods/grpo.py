"""Shared GRPO machinery for flow models (docs/methods/grpo_baselines.md): SDE rollouts with log-probs, advantages, the
PPO-clipped loss with optional KL, and the per-(sample, step) backward. DanceGRPO, Flow-GRPO and Flow-GRPO-Fast
differ only in the hooks :meth:`GRPO.stochastic_steps` and :meth:`GRPO.select_train_steps` and in config values.
"""

from __future__ import annotations

from typing import TypeVar

import torch

from methods.advantages import advantage_keys, step_advantages
from methods.base import Method, Rollout
from methods.chunking import chunked_sde_step, pad_rows
from methods.first_update_ratios import FirstUpdateRatios
from methods.grpo_config import Decode, GRPOConfig, NoiseKernel
from methods.losses import kl_to_reference, ppo_clip_loss
from methods.schedule import make_sigmas, quantize_model_time
from methods.sde import FlowSDEScheduler
from methods.trajectory import Trajectory, transition_states
from methods.update_rows import add_sums, row_calls, rows_per_call, trained_rows
from models.backbone import Backbone, PromptEmbeds, host_randn

#: the config class of a GRPO method (the baselines, Flash-GRPO, JAGG)
GRPOConfigT = TypeVar("GRPOConfigT", bound=GRPOConfig)


class GRPO(Method[GRPOConfigT]):
    """GRPO over an SDE sampler. Subclasses choose which steps are stochastic and which are trained."""

    def __init__(self, cfg: GRPOConfigT, backbone: Backbone):
        super().__init__(cfg, backbone)
        self.sigmas = make_sigmas(cfg.schedule, cfg.sampling_steps, cfg.shift, backbone)  # the family's grid
        self.sde = FlowSDEScheduler(self.sigmas, cfg.noise_kernel, cfg.eta)
        self.first_update = FirstUpdateRatios(
            cfg.clip_range,
            cfg.pre_update_clip_warn,
            "Fix: compute the rollout and the update alike (dtype, attention backend, compile; in bf16 "
            "method.match_update_shapes=true), or raise method.clip_range; see docs/metrics.md#first-update-ratios",
        )

    # -- config -------------------------------------------------------------------------------------------------
    @classmethod
    def needs_reference(cls, cfg: GRPOConfigT) -> bool:
        return cfg.kl_beta > 0

    @classmethod
    def trained_per_sample(cls, cfg: GRPOConfigT) -> int:
        """How many transitions each sample trains (the variant's rule)."""
        raise NotImplementedError

    @classmethod
    def passes_per_sample(cls, cfg: GRPOConfigT) -> tuple[int, int]:
        """The N-step rollout, then per trained transition a forward (and a reference forward with KL) and a
        backward."""
        trained = cls.trained_per_sample(cfg)
        return cfg.sampling_steps + trained * (2 if cfg.kl_beta > 0 else 1), trained

    #: ``select_train_steps`` draws nothing from the generator, so it can run before sampling and the rollout keeps
    #: only the states its transitions read (DanceGRPO draws its random steps after sampling: every state is kept)
    train_steps_before_sampling: bool = True

    # -- hooks for the baselines --------------------------------------------------------------------------------
    def stochastic_steps(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """(n, N) bool: which transitions inject noise. Default: every step is an SDE step."""
        return torch.ones(n, self.sde.num_steps, dtype=torch.bool)

    def group_stochastic_steps(self, group_keys: list, generator: torch.Generator) -> torch.Tensor:
        """(B, N) bool given each row's group key, for methods whose draw is per group (Flash-GRPO: one SDE step
        per prompt group). Default: the groups play no part, see :meth:`stochastic_steps`."""
        return self.stochastic_steps(len(group_keys), generator)

    def select_train_steps(self, stochastic: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """(B, T) long: the transitions each sample trains."""
        raise NotImplementedError

    def sde_steps_taken(self, stochastic: torch.Tensor) -> int:
        """How many steps of the N-step grid the SDE sampler takes (``stochastic`` (B, N): the rollout's mask).
        Default: all N. A method that finishes the rollout with a solver of its own after them (MixGRPO-Flash)
        returns fewer and implements :meth:`finish_rollout`; their states are not kept, so no step after them can be
        trained."""
        return self.sde.num_steps

    def finish_rollout(
        self, x: torch.Tensor, x0: torch.Tensor, embeds: PromptEmbeds, taken: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The rest of the rollout from ``x`` after ``taken`` SDE-sampler steps (``x0``: the data prediction of the
        last of them): ``(final latents, the last step's data prediction)``."""
        raise NotImplementedError

    def model_time(self, sigma: torch.Tensor) -> torch.Tensor:
        return quantize_model_time(sigma) if self.cfg.quantize_timestep else sigma

    # -- rollout ------------------------------------------------------------------------------------------------
    def _initial_noise(self, n_prompts: int, generator: torch.Generator) -> torch.Tensor:
        g = int(self.cfg.group_size)
        if self.cfg.init_same_noise:  # DanceGRPO: all G generations of a prompt start from the same latent
            return self.backbone.initial_noise(n_prompts, generator).repeat_interleave(g, dim=0)
        return self.backbone.initial_noise(n_prompts * g, generator)

    @torch.no_grad()
    def rollout(self, prompts: list[str], generator: torch.Generator) -> Rollout:
        """Sample every group, ``method.rollout_chunk`` rows per transformer call; keep the states the update reads
        (:mod:`methods.trajectory`) and the latents ``score`` decodes (docs/memory.md#chunked-rollouts)."""
        g, bb, sde = int(self.cfg.group_size), self.backbone, self.sde
        expanded = [p for p in prompts for _ in range(g)]
        first = self.world.rank * len(prompts)  # group keys unique across ranks
        keys = [first + k for k in range(len(prompts)) for _ in range(g)]
        embeds = bb.encode_prompts(list(prompts)).repeat_rows(g)
        x = self._initial_noise(len(prompts), generator)
        b, n = x.shape[0], sde.num_steps
        stochastic = self.group_stochastic_steps(keys, generator)
        steps = self.select_train_steps(stochastic, generator) if self.train_steps_before_sampling else None
        traj = Trajectory(
            b,
            n + 1,
            tuple(x.shape[1:]),
            x.dtype,
            x.device,
            transition_states(steps, n + 1),
            offload=bool(self.cfg.trajectory_offload),
        )
        log_probs = torch.full((b, n), float("nan"), dtype=torch.float32, device=x.device)
        traj.record(0, x)
        x0 = None
        stochastic_on_device = stochastic.to(x.device)  # once, not per step (docs/performance.md)
        taken = self.sde_steps_taken(stochastic)
        for i in range(taken):
            index = torch.full((b,), i, dtype=torch.long, device=x.device)
            noise = host_randn(tuple(x.shape), generator, x.device)
            x, log_probs[:, i], x0 = chunked_sde_step(
                bb,
                sde,
                x,
                index,
                self.model_time(sde.sigma(index)).float(),
                embeds,
                stochastic_on_device[:, i],
                noise,
                self.rollout_rows,
                want_x0=i == taken - 1 and (taken < n or self.cfg.decode == Decode.pred_x0),
                pad=bool(self.cfg.match_update_shapes),
            )
            traj.record(i + 1, x)
        if taken < n:
            assert x0 is not None
            x, x0 = self.finish_rollout(x, x0, embeds, taken)
        if steps is None:
            steps = self.select_train_steps(stochastic, generator)
        return Rollout(
            prompts=expanded,
            group_keys=keys,
            embeds=embeds,
            images=None,
            latents=traj,
            log_probs=log_probs,
            train_steps=steps.to(x.device),
            decode_latents=x0 if self.cfg.decode == Decode.pred_x0 else x,
            extras={"stochastic": stochastic},
        )

    # -- advantages ---------------------------------------------------------------------------------------------
    def advantage_keys(self, rollout: Rollout) -> list:
        """What groups the samples for advantages (``method.advantage``: by group, or by prompt string over the
        gathered batch as Flow-GRPO)."""
        return advantage_keys(rollout, self.cfg.advantage)

    def prepare_update(self, rollout: Rollout) -> dict[str, float]:
        """Advantages over the whole step, from every rank's rewards (:func:`methods.advantages.step_advantages`)."""
        return step_advantages(
            rollout,
            self.advantage_keys(rollout),
            self.cfg.advantage,
            self.cfg.global_std,
            self.cfg.adv_clip_max,
            self.world,
        )

    def on_update_start(self, index: int) -> None:
        self.first_update.active = index == 0

    def step_metrics(self) -> dict[str, float]:
        """``health/first_update_*``: the first update's ratio drift (:mod:`methods.first_update_ratios`)."""
        self.first_update.active = False
        return self.first_update.flush()

    # -- loss ---------------------------------------------------------------------------------------------------
    def step_loss(
        self,
        rollout: Rollout,
        samples: torch.Tensor,
        index: torch.Tensor,
        velocity: torch.Tensor,
        ref_velocity: torch.Tensor | None = None,
    ):
        """Per-sample GRPO loss of transition ``index`` given the policy's velocity (differentiable in it).

        Returns ``(loss (m,), stats)``. Used by the exact backward here and by methods that compute upstream
        gradients on detached velocities (JAGG).
        """
        x = rollout.latents[samples, index]
        x_next = rollout.latents[samples, index + 1]
        log_prob, mean = self.sde.log_prob(x_next, x, velocity, index)
        loss, stats = self.transition_loss(rollout, samples, index, log_prob, mean)
        self.first_update.add(stats["ratio"])  # a no-op after the rollout's first optimizer step
        if ref_velocity is not None:
            kl = self.kl_term(mean, self.sde.mean_std(x, ref_velocity, index)[0], index)
            loss = loss + self.kl_penalty(rollout, samples, kl)
            stats["kl"] = kl.detach()
        return loss, stats

    def transition_loss(
        self, rollout: Rollout, samples: torch.Tensor, index: torch.Tensor, log_prob: torch.Tensor, mean: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Per-sample policy loss (m,) of transition ``index`` of ``samples`` from the policy's log-prob and mean of
        it (differentiable), and its detached statistics. Default: :meth:`policy_loss` on the log-probs; methods whose
        policy term needs the transition's means override this (GRPO-Guard, Flow-DPPO)."""
        assert rollout.log_probs is not None  # sample() records them
        return self.policy_loss(rollout, samples, log_prob, rollout.log_probs[samples, index])

    def policy_loss(
        self, rollout: Rollout, samples: torch.Tensor, log_prob: torch.Tensor, old_log_prob: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Per-sample policy loss (m,) of ``samples`` from their new and rollout log-probs, and its detached
        statistics (``ratio``, ``clipped``, ``approx_kl``; see :func:`accumulate_stats`). Default: the PPO-clipped
        surrogate with ``clip_range``."""
        assert rollout.advantages is not None  # prepare_update() sets them
        return ppo_clip_loss(log_prob, old_log_prob, rollout.advantages[samples], self.cfg.clip_range)

    def kl_term(self, mean: torch.Tensor, ref_mean: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """Per-sample KL of the policy's step to the reference's. Upstream's CPS code divides by the step's own
        variance, i.e. the exact Gaussian KL, so ``noise_kernel=cps`` always takes the exact form (docs/cps.md)."""
        delta = self.sde.table(index.device)[index + 1] - self.sde.sigma(index)
        exact = bool(self.cfg.kl_exact) or self.sde.noise_kernel == NoiseKernel.cps
        return kl_to_reference(mean, ref_mean, self.sde.diffusion_coef(index), exact, delta)

    def kl_penalty(self, rollout: Rollout, samples: torch.Tensor, kl: torch.Tensor) -> torch.Tensor:
        """What the per-sample KL to the reference policy adds to the loss (computed only when ``kl_beta > 0``).
        Default: ``kl_beta x kl``."""
        return self.cfg.kl_beta * kl

    @property
    def rollout_rows(self) -> int:
        """Transformer rows per sampling call: ``method.rollout_chunk``, or ``update_batch`` with
        ``match_update_shapes`` (the update's calls then have the rollout's shape: docs/metrics.md#first-update-ratios)."""
        return int(self.cfg.update_batch if self.cfg.match_update_shapes else self.cfg.rollout_chunk)

    def velocity_at(
        self, rollout: Rollout, samples: torch.Tensor, index: torch.Tensor, reference: bool = False
    ) -> torch.Tensor:
        """The velocities of rows ``samples`` (m,) at transitions ``index`` (m,), one transformer call; with
        ``method.match_update_shapes`` the call is padded to a full ``update_batch`` and the padding dropped."""
        m = samples.shape[0]
        if self.cfg.match_update_shapes:
            full = rows_per_call(self.cfg.update_batch, self.backbone)
            samples, index = pad_rows(samples, full), pad_rows(index, full)
        x = rollout.latents[samples, index]
        t = self.model_time(self.sde.sigma(index)).float()
        embeds = rollout.embeds.select(samples)
        if reference:
            with torch.no_grad(), self.backbone.reference():
                return self.backbone.velocity(x, t, embeds)[:m]
        return self.backbone.velocity(x, t, embeds)[:m]

    def backward(self, rollout: Rollout, samples: torch.Tensor, update_size: int) -> dict[str, torch.Tensor]:
        """Exact backward of every trained (sample, step) row, ``method.update_batch`` rows per transformer call,
        each loss divided by ``update_size x T`` (DanceGRPO's ``gradient_accumulation_steps x train_timesteps``)."""
        samples = samples.to(rollout.latents.device, non_blocking=True)  # the plan's pinned host indices
        assert rollout.train_steps is not None  # sample() sets the trained steps
        steps = rollout.train_steps[samples]
        t_count = steps.shape[1]
        totals: dict[str, torch.Tensor] = {}
        self.exact_rows_backward(rollout, samples, steps, update_size * t_count, totals, 1.0 / t_count)
        return totals

    def exact_rows_backward(
        self,
        rollout: Rollout,
        samples: torch.Tensor,
        steps: torch.Tensor,
        norm: int,
        totals: dict[str, torch.Tensor],
        weight: float,
    ) -> None:
        """Forward + backward of the rows of ``samples`` (m,) at their transitions ``steps`` (m, C), packed into calls
        of ``method.update_batch`` rows (:mod:`methods.update_rows`): the summed loss is the same, so is the
        gradient. Methods that train some steps exactly and others differently (JAGG) call this for the exact ones."""
        row_samples, row_steps = trained_rows(samples, steps)
        for call in row_calls(len(row_samples), rows_per_call(self.cfg.update_batch, self.backbone)):
            self.exact_step_backward(rollout, row_samples[call], row_steps[call], norm, totals, weight)

    def exact_step_backward(
        self,
        rollout: Rollout,
        samples: torch.Tensor,
        index: torch.Tensor,
        norm: int,
        totals: dict[str, torch.Tensor],
        weight: float,
    ) -> None:
        """One transformer call: forward + backward of rows ``samples`` (r,) at transitions ``index`` (r,), the loss
        summed over the rows and divided by ``norm``; statistics added to ``totals`` with ``weight``."""
        ref_v = self.velocity_at(rollout, samples, index, reference=True) if self.cfg.kl_beta > 0 else None
        loss, stats = self.step_loss(rollout, samples, index, self.velocity_at(rollout, samples, index), ref_v)
        (loss.sum() / norm).backward()
        accumulate_stats(totals, loss, stats, weight=weight)


def accumulate_stats(
    totals: dict[str, torch.Tensor], loss: torch.Tensor, stats: dict[str, torch.Tensor], weight: float
) -> None:
    """Add per-sample sums (weighted, e.g. by 1/T) so the trainer can average them over samples; device tensors,
    read back once per step by the trainer (launcher/train/update_loop.py)."""
    sums = {
        "loss": loss.detach().sum(),
        "policy/clip_frac": stats["clipped"].sum(),
        "policy/approx_kl": stats["approx_kl"].sum(),
        "policy/ratio_mean": stats["ratio"].sum(),
    }
    if "kl" in stats:
        sums["policy/kl_ref"] = stats["kl"].sum()
    sums.update({k: v.sum() for k, v in stats.items() if "/" in k})  # a method's own, e.g. dppo/kl_old
    add_sums(totals, {k: weight * v for k, v in sums.items()})
