"""Flow-DPPO (arXiv:2606.11025; docs/methods/flow_dppo.md): Flow-GRPO whose PPO ratio clip is replaced by a trust
region on the exact Gaussian KL between the rollout policy's and the current policy's SDE transitions
(:func:`methods.flow_dppo_loss.dppo_loss`).

The sampler is the authors' recipe's: ``method.sde_steps`` SDE steps drawn per training iteration from
``method.sde_range`` (ODE Euler steps elsewhere), and exactly those are trained; ``sde_steps=0`` is Flow-GRPO's
all-SDE sampler and trained steps. The KL needs the rollout policy's mean of every trained transition,
``rollout.extras["old_mean"]`` (B, T, *latent) fp32, column j the sample's j-th trained step: replayed without
gradients at the pre-update weights before the updates (``method.old_means=replay``, the authors'), or kept while
sampling (``rollout``). The training iteration is this method's state (``state_dict``), so a resumed run draws the
SDE steps the uninterrupted run would have."""

from __future__ import annotations

import torch

from methods.base import Rollout
from methods.flow_dppo_config import Anchor, FlowDPPOConfig, dppo_trained, sde_pool
from methods.flow_dppo_loss import dppo_loss, kl_sigma, sde_step_draw
from methods.flow_grpo import FlowGRPO
from methods.sde import FlowSDEScheduler, SDEStepOutput
from methods.update_rows import row_calls, rows_per_call, trained_rows
from models.backbone import Backbone


class _MeanKeepingSDE(FlowSDEScheduler):
    """The sampler's SDE, which keeps the mean of each step in ``keep`` while ``rows`` is set (the rollout's batch
    size): the rollout calls ``step`` step by step, each step's chunks covering rows 0..B-1 in order
    (methods.chunking.sample_chunks)."""

    def __init__(self, sigmas: torch.Tensor, noise_kernel: str, eta: float):
        super().__init__(sigmas, noise_kernel, eta)
        self.rows: int | None = None
        self.keep: frozenset[int] = frozenset()
        self.kept: list[torch.Tensor] = []
        self._calls: list[torch.Tensor] = []
        self._filled = self._step = 0

    def start(self, rows: int) -> None:
        self.rows, self.kept, self._calls, self._filled, self._step = rows, [], [], 0, 0

    def step(self, sample, velocity, index, stochastic=True, noise=None, generator=None) -> SDEStepOutput:
        out = super().step(sample, velocity, index, stochastic, noise, generator)
        if self.rows is not None:
            if self._step in self.keep:
                self._calls.append(out.mean.detach().float())
            self._filled += out.mean.shape[0]
            if self._filled == self.rows:
                if self._calls:
                    self.kept.append(torch.cat(self._calls))
                self._calls, self._filled, self._step = [], 0, self._step + 1
        return out


class FlowDPPO(FlowGRPO[FlowDPPOConfig]):
    def __init__(self, cfg: FlowDPPOConfig, backbone: Backbone):
        super().__init__(cfg, backbone)
        self.recorder = _MeanKeepingSDE(self.sigmas, cfg.noise_kernel, cfg.eta)
        self.sde = self.recorder
        self.iteration = torch.zeros((), dtype=torch.int64)  # training iterations finished (resume loads it in place)

    # -- config ---------------------------------------------------------------------------------------------------
    @classmethod
    def trained_per_sample(cls, cfg: FlowDPPOConfig) -> int:
        return dppo_trained(cfg)

    @classmethod
    def replays(cls, cfg: FlowDPPOConfig) -> bool:
        return Anchor.replay in (cfg.old_means, cfg.old_log_probs)

    @classmethod
    def passes_per_sample(cls, cfg: FlowDPPOConfig) -> tuple[int, int]:
        """Flow-GRPO's, plus a forward per trained transition when the anchor is replayed."""
        fwd, bwd = super().passes_per_sample(cfg)
        return fwd + (cls.trained_per_sample(cfg) if cls.replays(cfg) else 0), bwd

    # -- which steps are stochastic and trained -------------------------------------------------------------------
    def sde_steps(self) -> list[int]:
        """This iteration's SDE steps (``method.sde_steps`` > 0)."""
        first, stop = sde_pool(self.cfg.sampling_steps, self.cfg.sde_range)
        return sde_step_draw(int(self.iteration), self.cfg.sampling_steps, int(self.cfg.sde_steps), first, stop)

    def stochastic_steps(self, n: int, generator: torch.Generator) -> torch.Tensor:
        if not self.cfg.sde_steps:
            return super().stochastic_steps(n, generator)
        mask = torch.zeros(n, self.sde.num_steps, dtype=torch.bool)
        mask[:, self.sde_steps()] = True
        return mask

    def select_train_steps(self, stochastic: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """The SDE steps in order (every sample the same), or Flow-GRPO's 0..T-1; the rollout keeps their means."""
        if self.cfg.sde_steps:
            steps = stochastic[0].nonzero().flatten().expand(stochastic.shape[0], -1).clone()
        else:
            steps = super().select_train_steps(stochastic, generator)
        self.recorder.keep = frozenset(int(i) for i in steps[0])
        return steps

    # -- the old policy's means -----------------------------------------------------------------------------------
    @torch.no_grad()
    def rollout(self, prompts: list[str], generator: torch.Generator) -> Rollout:
        """Flow-GRPO's rollout; with ``old_means=rollout`` it keeps the mean of every trained transition."""
        if self.cfg.old_means != Anchor.rollout:
            return super().rollout(prompts, generator)
        self.recorder.start(len(prompts) * int(self.cfg.group_size))
        try:
            rollout = super().rollout(prompts, generator)
            rollout.extras["old_mean"] = torch.stack(self.recorder.kept, dim=1)  # (B, T, *latent)
        finally:
            self.recorder.rows, self.recorder.kept = None, []
        return rollout

    def prepare_update(self, rollout: Rollout) -> dict[str, float]:
        metrics = super().prepare_update(rollout)
        if self.replays(self.cfg):
            self.replay_anchor(rollout)
        return metrics

    @torch.no_grad()
    def replay_anchor(self, rollout: Rollout) -> None:
        """Every trained row once at the pre-update weights, ``method.update_batch`` rows per call, as the update
        packs them: the old means (``old_means=replay``) and log-probs (``old_log_probs=replay``)."""
        assert rollout.train_steps is not None and rollout.log_probs is not None
        steps = rollout.train_steps
        b, t = steps.shape
        samples = torch.arange(b, device=steps.device)
        row_samples, row_steps = trained_rows(samples, steps)
        row_cols = torch.arange(t, device=steps.device).repeat(b)
        means = None
        for call in row_calls(b * t, rows_per_call(self.cfg.update_batch, self.backbone)):
            s, i = row_samples[call], row_steps[call]
            x, x_next = rollout.latents[s, i], rollout.latents[s, i + 1]
            log_prob, mean = self.sde.log_prob(x_next, x, self.velocity_at(rollout, s, i), i)
            if self.cfg.old_means == Anchor.replay:
                if means is None:
                    means = torch.empty(b, t, *mean.shape[1:], dtype=torch.float32, device=mean.device)
                means[s, row_cols[call]] = mean.float()
            if self.cfg.old_log_probs == Anchor.replay:
                rollout.log_probs[s, i] = log_prob.float()
        if means is not None:
            rollout.extras["old_mean"] = means

    # -- loss -----------------------------------------------------------------------------------------------------
    def transition_loss(
        self, rollout: Rollout, samples: torch.Tensor, index: torch.Tensor, log_prob: torch.Tensor, mean: torch.Tensor
    ):
        """:func:`dppo_loss` as the policy term: it needs the transition's means, new and old."""
        assert rollout.log_probs is not None and rollout.advantages is not None and rollout.train_steps is not None
        column = (rollout.train_steps[samples] == index[:, None]).int().argmax(1)  # on the device: no sync
        return dppo_loss(
            log_prob,
            rollout.log_probs[samples, index],
            rollout.advantages[samples],
            mean,
            rollout.extras["old_mean"][samples, column],
            kl_sigma(self.sde, index, self.cfg.kl_std),
            float(self.cfg.kl_mask_threshold),
        )

    # -- state ----------------------------------------------------------------------------------------------------
    def end_step(self, step: int) -> None:
        """The SDE steps are drawn per training iteration, as the reference's ``rollout_id``."""
        self.iteration.fill_(step + 1)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"flow_dppo.iteration": self.iteration}
