"""JAGG, Jacobian-Aggregated Group Gradient (Ding et al., arXiv:2607.17572; docs/methods/jagg.md).

JAGG keeps a GRPO baseline's sampler, advantages, PPO loss, normalisation and update cadence, and replaces only the
backward of groups of W consecutive trained steps: W forwards with a graph only at the two endpoints, the exact
per-step upstream gradients ``s_j = dL_j / dv_j`` on detached copies of the velocities (no transformer backward),
folded with t-weights into ``s_base`` and ``s_corr``, then **one** backward through the two endpoints. That costs 2
transformer backward passes per sample per group instead of W; the loss value is unchanged, only the gradient
replaces the intermediate Jacobians by their interpolation in t (exact when the velocity is affine in (z, t)).

``method.base`` picks the baseline. ``JAGG(cfg, backbone)`` builds the class that derives from both JAGG and that
baseline (:class:`JAGGDanceGRPO`, :class:`JAGGFlowGRPO`, :class:`JAGGFlowGRPOFast`), so every hook JAGG does not
override is the baseline's own code.
"""

from __future__ import annotations

import logging

import torch

from methods.base import Rollout
from methods.dance_grpo import DanceGRPO
from methods.flow_grpo import FlowGRPO
from methods.flow_grpo_fast import FlowGRPOFast
from methods.grpo import GRPO, accumulate_stats
from methods.jagg_config import Alpha, JAGGConfig
from methods.jagg_diagnostics import GradientProbe, compare
from methods.jagg_groups import GroupLayout
from methods.jagg_weights import aggregate, endpoint_weights, index_weights, time_weights
from methods.trained_steps import jagg_trainable
from methods.update_rows import row_calls, rows_per_call
from models.backbone import Backbone
from rewardflow.distributed import all_gather_objects
from rewardflow.errors import ConfigError

log = logging.getLogger(__name__)


class JAGG(GRPO[JAGGConfig]):
    """JAGG on top of the GRPO baseline named by ``cfg.base`` (see the module docstring and docs/methods/jagg.md)."""

    def __new__(cls, *args, **kwargs):
        # JAGG(cfg, backbone) builds the variant for cfg.base; variants (and copy/pickle) construct themselves
        if cls is JAGG:
            cfg = kwargs["cfg"] if "cfg" in kwargs else args[0]
            cls = VARIANTS[cfg.base]
        return super().__new__(cls)

    def __init__(self, cfg: JAGGConfig, backbone: Backbone):
        super().__init__(cfg, backbone)
        self.layout = GroupLayout(self.num_trainable(cfg), int(cfg.window), float(cfg.jagg_frac), cfg.remainder)
        self._rollouts = 0
        self._diagnose_pending = False
        self._diagnostics: dict[str, list[float]] = {}
        lay = self.layout
        tail = f" + an exact tail group of {lay.tail}" if lay.tail else ""
        routed = f"groups 0..{lay.num_jagg - 1}" if lay.num_jagg else "no group"
        log.info(
            "JAGG over %s: %d trained steps = %d groups of %d%s; JAGG on %s (n_J = floor(jagg_frac %.3g x %d) "
            "= %d), exact backward on the rest: %d instead of %d transformer backward rows per sample",
            cfg.base,
            lay.num_steps,
            lay.num_groups,
            lay.window,
            tail,
            routed,
            lay.jagg_frac,
            lay.num_groups,
            lay.num_jagg,
            lay.backward_rows_per_sample(),
            lay.num_steps,
        )
        if lay.num_jagg == 0 and lay.jagg_frac > 0:
            log.warning(
                "method.jagg_frac=%g routes no group to JAGG (floor(%g x %d groups) = 0): this run is the "
                "exact baseline",
                lay.jagg_frac,
                lay.jagg_frac,
                lay.num_groups,
            )
        if lay.window == 2 and lay.num_jagg:
            log.warning("method.window=2: JAGG is exact but saves no backward pass (2 per group either way)")
        if cfg.alpha == "model_time":  # checked here once, not per group inside the update (no host sync there)
            times = self.model_time(self.sigmas[:-1])
            if bool((times[: 1 - lay.window] == times[lay.window - 1 :]).any()):
                raise ConfigError(
                    f"method.alpha=model_time: the model's time input is equal at the two endpoints "
                    f"of a group of {lay.window} steps (floor(1000 sigma) / 1000 with "
                    f"method.quantize_timestep=true), so t-weights are undefined. Fix: method.alpha="
                    f"sigma (the default), fewer method.sampling_steps or a smaller method.window"
                )

    # -- config -------------------------------------------------------------------------------------------------
    @classmethod
    def num_trainable(cls, m: JAGGConfig, sampling_steps: int | None = None) -> int:
        """M: how many steps per sample JAGG trains over ``m.base`` (the rule: methods/trained_steps.py)."""
        return jagg_trainable(m, sampling_steps)

    @classmethod
    def trained_per_sample(cls, cfg: JAGGConfig) -> int:
        return cls.num_trainable(cfg)

    @classmethod
    def passes_per_sample(cls, cfg: JAGGConfig) -> tuple[int, int]:
        """The baseline's forwards; backward rows: 2 per JAGG group, W per exact one (a step of ``diagnose_every``
        runs both routes). With ``group_fraction < 1`` the groups, and so the count, are drawn per step."""
        variant = VARIANTS[cfg.base]
        if cfg.group_fraction < 1:
            raise ValueError("method.group_fraction < 1 draws the trained groups per step: no fixed pass count")
        fwd, _ = super(JAGG, variant).passes_per_sample(cfg)
        layout = GroupLayout(variant.num_trainable(cfg), int(cfg.window), float(cfg.jagg_frac), cfg.remainder)
        return fwd, layout.backward_rows_per_sample()

    # -- rollout: the baseline's, then its trainable steps are cut into groups ----------------------------------
    def rollout(self, prompts: list[str], generator: torch.Generator) -> Rollout:
        # diagnostic steps: rollouts 0, N, 2N, ... of this process
        every = int(self.cfg.diagnose_every)
        self._diagnose_pending = every > 0 and self._rollouts % every == 0
        self._rollouts += 1
        rollout = super().rollout(prompts, generator)
        chosen = self.layout.choose_groups(float(self.cfg.group_fraction), generator)
        if self.cfg.group_fraction < 1:  # rank 0's draw: all ranks must run the same passes (FSDP)
            chosen = all_gather_objects(chosen)[0]
        groups = self.layout.assign(rollout.train_steps, chosen)
        rollout.train_steps = groups.steps
        rollout.extras["jagg_groups"] = groups
        return rollout

    # -- update -------------------------------------------------------------------------------------------------
    def backward(self, rollout: Rollout, samples: torch.Tensor, update_size: int) -> dict[str, torch.Tensor]:
        """JAGG groups (index < n_J) get :meth:`jagg_group_backward`; the rows of every other group go through the
        baseline's exact backward together, ``method.update_batch`` rows per transformer call. Every per-step loss is
        divided by ``update_size x T`` as in the baseline, so with ``jagg_frac=0`` this is the baseline's backward,
        operation for operation."""
        samples = samples.to(rollout.latents.device, non_blocking=True)  # the plan's pinned host indices
        assert rollout.train_steps is not None  # sample() sets the trained steps
        steps = rollout.train_steps[samples]
        norm, weight = update_size * steps.shape[1], 1.0 / steps.shape[1]
        diagnose, self._diagnose_pending = self._diagnose_pending, False
        totals: dict[str, torch.Tensor] = {}
        exact: list[int] = []
        for group, cols in rollout.extras["jagg_groups"].slots():
            args = (rollout, samples, steps[:, cols], norm, totals, weight)
            if diagnose and cols.stop - cols.start >= 2:
                self._diagnose_group(*args, group=group)
            elif self.layout.is_jagg(group):
                self.jagg_group_backward(*args)
            else:
                exact.extend(range(cols.start, cols.stop))
        if exact:
            self.exact_group_backward(rollout, samples, steps[:, exact], norm, totals, weight)
        return totals

    def exact_group_backward(
        self,
        rollout: Rollout,
        samples: torch.Tensor,
        steps: torch.Tensor,
        norm: int,
        totals: dict[str, torch.Tensor],
        weight: float,
    ) -> None:
        """The baseline's exact backward of the given steps (one backward row per sample and step), their rows
        packed ``method.update_batch`` per transformer call."""
        self.exact_rows_backward(rollout, samples, steps, norm, totals, weight)

    def jagg_group_backward(
        self,
        rollout: Rollout,
        samples: torch.Tensor,
        steps: torch.Tensor,
        norm: int,
        totals: dict[str, torch.Tensor],
        weight: float,
    ) -> None:
        """One JAGG group (docs/methods/jagg.md#one-jagg-group), rows ``samples`` (m,) at transitions ``steps`` (m, W),
        in sub-batches of ``update_batch // 2`` samples (their 2 endpoints per sample fill one call):

        1. W forwards: the W - 2 intermediate ones without a graph (``update_batch`` rows per call), the two endpoints
           of the sub-batch as **one** call with per-row timesteps, so the single backward below visits every
           (sharded) block once (docs/methods/jagg.md#under-fsdp2).
        2. exact losses and upstream gradients ``s_j`` on detached proxies (:meth:`upstream_gradients`).
        3.-4. t-weights and ``s_base``, ``s_corr`` (:mod:`methods.jagg_weights`).
        5. one backward through the endpoint batch: 2 transformer backward rows per sample.
        """
        per_call = rows_per_call(self.cfg.update_batch, self.backbone)
        for part in row_calls(samples.shape[0], max(1, per_call // 2)):
            self._jagg_group_part(rollout, samples[part], steps[part], norm, totals, weight, per_call)

    def _jagg_group_part(
        self,
        rollout: Rollout,
        samples: torch.Tensor,
        steps: torch.Tensor,
        norm: int,
        totals: dict[str, torch.Tensor],
        weight: float,
        per_call: int,
    ) -> None:
        w, m = steps.shape[1], samples.shape[0]
        with torch.no_grad():  # intermediate steps first: nothing of theirs stays in memory
            inner_samples, inner_steps = samples.repeat(w - 2), steps[:, 1:-1].T.reshape(-1)  # step-major rows
            flat = [
                self.velocity_at(rollout, inner_samples[c], inner_steps[c])
                for c in row_calls(len(inner_samples), per_call)
            ]
            inner = list(torch.cat(flat).split(m)) if flat else []
        ends = self.velocity_at(rollout, samples.repeat(2), torch.cat([steps[:, 0], steps[:, -1]]))
        first, last = ends.chunk(2)
        upstream, loss, stats = self.upstream_gradients(rollout, samples, steps, [first, *inner, last], norm)
        accumulate_stats(totals, loss, stats, weight=weight)  # the exact per-step loss values
        w_base, w_corr = endpoint_weights(self.interpolation_weights(steps), self.cfg.ablation)
        s_base, s_corr = aggregate(upstream, w_base, w_corr)
        ends.backward(torch.cat([s_base, s_corr]).to(ends.dtype))

    def upstream_gradients(
        self, rollout: Rollout, samples: torch.Tensor, steps: torch.Tensor, velocities: list[torch.Tensor], norm: int
    ):
        """Per-step losses ``L_j`` (PPO-clipped, plus beta KL_j when ``kl_beta > 0``) divided by ``norm``, and
        ``s_j = dL_j / dv_j`` by autograd through the SDE log-prob and the PPO term on detached fp32 (or fp64)
        copies of the velocities: a few element-wise ops, never the transformer (step 2 of
        docs/methods/jagg.md#one-jagg-group). The clip masks and ratios are those of the current parameters, so this
        holds off-policy too.

        Returns ``(s (W, m, *latent), loss (W m,), stats)`` with rows ordered step-major.
        """
        w = steps.shape[1]
        proxies = torch.stack([v.detach() for v in velocities])
        proxies = proxies.to(torch.promote_types(proxies.dtype, torch.float32)).requires_grad_()
        ref = None
        if self.cfg.kl_beta > 0:  # the reference's velocities of the W x m rows, step-major like the proxies
            rows, times = samples.repeat(w), steps.T.reshape(-1)
            ref = torch.cat(
                [
                    self.velocity_at(rollout, rows[c], times[c], reference=True)
                    for c in row_calls(len(rows), rows_per_call(self.cfg.update_batch, self.backbone))
                ]
            )
        with torch.enable_grad():
            loss, stats = self.step_loss(rollout, samples.repeat(w), steps.T.reshape(-1), proxies.flatten(0, 1), ref)
            (upstream,) = torch.autograd.grad(loss.sum() / norm, proxies)
        return upstream, loss.detach(), stats

    def interpolation_weights(self, steps: torch.Tensor) -> torch.Tensor:
        """``alpha`` (W, m) for transitions ``steps`` (m, W): t-weighted on the exact sigma schedule (default), on the
        time the model is fed (``alpha=model_time``: DanceGRPO's floor(1000 sigma)/1000), or the
        prototype's index weights (``alpha=index``)."""
        w, m = steps.shape[1], steps.shape[0]
        if self.cfg.alpha == Alpha.index:
            return index_weights(w, m, device=steps.device)
        times = self.sde.sigma(steps.T)
        return time_weights(self.model_time(times) if self.cfg.alpha == Alpha.model_time else times)

    # -- diagnostics --------------------------------------------------------------------------------------------
    def _diagnose_group(
        self,
        rollout: Rollout,
        samples: torch.Tensor,
        steps: torch.Tensor,
        norm: int,
        totals: dict[str, torch.Tensor],
        weight: float,
        group: int,
    ) -> None:
        """Train the group by its route as usual, also compute the other route's gradient (discarded), and record
        cosine and relative error of the JAGG gradient against the exact one (docs/methods/jagg.md#diagnostic-mode)."""
        jagg = self.layout.is_jagg(group)
        route, other = (
            (self.jagg_group_backward, self.exact_group_backward)
            if jagg
            else (self.exact_group_backward, self.jagg_group_backward)
        )
        probe = GradientProbe(self.backbone.trainable_parameters())
        accumulated = probe.take()
        route(rollout, samples, steps, norm, totals, weight)
        trained = probe.take()
        active, self.first_update.active = self.first_update.active, False  # the discarded route: not trained rows
        other(rollout, samples, steps, norm, {}, weight)
        self.first_update.active = active
        alternative = probe.take()
        probe.put(accumulated, trained)
        for key, value in compare(*((trained, alternative) if jagg else (alternative, trained))).items():
            self._diagnostics.setdefault(f"jagg/{key}_group_{group}", []).append(value)

    def step_metrics(self) -> dict[str, float]:
        """``jagg/cos_group_<g>`` and ``jagg/rel_err_group_<g>`` on diagnostic steps (mean over micro-batches), and
        the GRPO methods' ``health/first_update_*``."""
        out = super().step_metrics() | {k: sum(v) / len(v) for k, v in self._diagnostics.items()}
        self._diagnostics = {}
        return out


class JAGGDanceGRPO(JAGG, DanceGRPO[JAGGConfig]):
    """JAGG over DanceGRPO. DanceGRPO trains a random subset of steps per sample, which does not form groups of
    consecutive steps (docs/methods/jagg.md#which-steps-are-trained-per-baseline), so JAGG trains all N - 1
    trainable steps (the paper: 21 sampling steps, 20 trained, 5 groups of 4); ``method.group_fraction < 1``
    subsamples whole groups per step instead."""

    train_steps_before_sampling = True  # all N - 1 trainable steps, known before sampling

    def select_train_steps(self, stochastic: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        b, n = stochastic.shape
        return torch.arange(n - 1).expand(b, -1).clone()


class JAGGFlowGRPO(JAGG, FlowGRPO[JAGGConfig]):
    """JAGG over Flow-GRPO: its steps 0 .. floor(timestep_fraction N) - 1, in order."""


class JAGGFlowGRPOFast(JAGG, FlowGRPOFast[JAGGConfig]):
    """JAGG over Flow-GRPO-Fast: the SDE window's steps (its stock: W = window_size, jagg_frac = 1)."""


VARIANTS: dict[str, type[JAGG]] = {
    "dance_grpo": JAGGDanceGRPO,
    "flow_grpo": JAGGFlowGRPO,
    "flow_grpo_fast": JAGGFlowGRPOFast,
}
