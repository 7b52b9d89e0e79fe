"""Efficient Adjoint Matching (EAM; arXiv:2605.11480) as a method of the shared trainer loop (docs/methods/eam.md).

**Reconstruction.** The EAM paper body was not available; this follows our reconstruction from the abstract
and first principles (docs/methods/eam.md#what-is-reconstructed), verified on the Gaussian toy
(tests/test_soc_toy.py). Every reconstructed choice is a config flag: the base constant ``c``, the terminal-score
estimator (``terminal_score``, ``delta``), the time sampling of the loss (``time_sampling``, ``loss_timesteps``,
``t_min``) and its weight (``loss_weight``).

One iteration, per sample (B = prompts_per_step x group_size):

1. ``rollout``: the endpoint ``X_1`` of a deterministic ``endpoint_nfe``-step Euler ODE of the fine-tuned model
   (on the family's shifted sigma grid), no gradients, no trajectory; the loss times ``t_j`` (``loss_timesteps`` =
   K_t per sample) and the kernel noise are drawn here.
2. ``score``: reward and ``grad r`` at ``X_1`` (decoded with gradients).
3. ``prepare_update``: the corrected terminal-cost gradient
   ``grad g = -lambda grad r - s_pre(X_1) - X_1 / c^2`` with the pretrained terminal score from one frozen forward
   (:mod:`methods.terminal_score`, ``tweedie_shrink`` by default).
4. ``backward``: ``X_t = t X_1 + (1 - t) eps`` (:class:`methods.bridge_kernel.BridgeKernel`), the closed-form
   adjoint's velocity target ``v_tgt = v_c(X_t, t) - c^2 (1 - t) / m_t grad g`` and the weighted regression
   ``w(t) ||v_theta(X_t, t) - v_tgt||^2`` with ``w = 4 / sigma(t)^2`` (offset ``sigma_offset``), i.e. the AM loss
   ``||u_theta + sigma Phi grad g||^2`` in control space; averaged over the K_t times.

``terminal_score=anchor`` is a biased ablation (docs/methods/eam.md#the-anchor-ablation): the target
``v_pre(X_t, t) + c^2 (1 - t) / m_t lambda grad r(X_1)`` (one extra frozen forward per loss time, no terminal score).

Transformer passes per sample: ``endpoint_nfe`` + 1 forwards (endpoint, Tweedie), K_t forward + backward for the
loss; no VJPs and no stored trajectory.
"""

from __future__ import annotations

import torch

from methods.adjoint_matching import am_loss_steps
from methods.base import Rollout
from methods.bridge_kernel import BridgeKernel
from methods.chunking import sample_chunks
from methods.closed_form_adjoint import corrected_terminal_grad, velocity_target
from methods.eam_config import EAMConfig, LossWeight, TerminalScore, TimeSampling
from methods.linear_base import LinearMemorylessBase
from methods.memoryless import expand_time
from methods.ode_sampler import am_time_grid, euler_ode
from methods.soc_base import SOCMethod
from methods.terminal_score import terminal_score
from methods.update_rows import add_sums
from models.backbone import Backbone, PromptEmbeds


class EAM(SOCMethod[EAMConfig]):
    def __init__(self, cfg: EAMConfig, backbone: Backbone):
        super().__init__(cfg, backbone)
        self.base = LinearMemorylessBase(float(cfg.c))
        self.endpoint_ts = am_time_grid(
            cfg.endpoint_schedule, int(cfg.endpoint_nfe), float(cfg.endpoint_shift), backbone
        )

    @classmethod
    def passes_per_sample(cls, cfg: EAMConfig) -> tuple[int, int]:
        """The endpoint's ``endpoint_nfe`` forwards, one frozen forward for the terminal score (``anchor``: one per
        loss time instead) and a forward + backward per loss time."""
        kt = int(cfg.loss_timesteps)
        frozen = kt if cfg.terminal_score == TerminalScore.anchor else 1
        return int(cfg.endpoint_nfe) + frozen + kt, kt

    # -- loss times (docs/methods/eam.md#loss-times) ------------------------------------------------------------
    def loss_times(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """(n, K_t) float64 AM times of the loss terms.

        ``uniform``: ``U[t_min, 1 - t_min]``; ``stratified``: one uniform draw in each of K_t equal bins of that
        interval; ``am_grid``: AM parity -- on the grid ``k / sampling_steps``, the last ``ceil(K_t / 2)`` points and
        ``floor(K_t / 2)`` random earlier ones (K_t = 20, K = 40 is AM's 10 + 10).
        """
        kt, lo, hi = int(self.cfg.loss_timesteps), float(self.cfg.t_min), 1.0 - float(self.cfg.t_min)
        mode = self.cfg.time_sampling
        if mode == TimeSampling.uniform:
            return lo + (hi - lo) * torch.rand((n, kt), generator=generator, dtype=torch.float64)
        if mode == TimeSampling.stratified:
            u = torch.rand((n, kt), generator=generator, dtype=torch.float64)
            return lo + (hi - lo) * (torch.arange(kt, dtype=torch.float64) + u) / kt
        k, last = int(self.cfg.sampling_steps), (kt + 1) // 2
        return am_loss_steps(n, k, last, kt - last, generator).double() / k

    # -- 1. endpoint ----------------------------------------------------------------------------------------------
    @torch.no_grad()
    def rollout(self, prompts: list[str], generator: torch.Generator) -> Rollout:
        expanded, keys = self.expand_prompts(prompts)
        embeds = self.backbone.encode_prompts(expanded)
        x0 = self.backbone.initial_noise(len(expanded), generator)
        b = x0.shape[0]
        x1 = torch.empty_like(x0)
        for idx in sample_chunks(b, self.backbone.rows_per_sample, self.cfg.rollout_chunk, x0.device):
            sub = embeds.select(idx)

            def velocity(x: torch.Tensor, t: torch.Tensor, sub: PromptEmbeds = sub) -> torch.Tensor:
                return self.velocity(x, t, sub)

            x1[idx] = euler_ode(velocity, x0[idx], self.endpoint_ts)
        times = self.loss_times(b, generator).to(x0.device)
        noise = torch.randn((b, times.shape[1], *x0.shape[1:]), generator=generator, dtype=torch.float64)
        return Rollout(
            prompts=expanded,
            group_keys=keys,
            embeds=embeds,
            images=None,
            latents=x1,
            extras={"loss_times": times, "kernel_noise": noise.to(x0.device, x0.dtype)},
        )

    # -- 2. reward gradient -------------------------------------------------------------------------------------
    def score(self, rollout: Rollout, reward: torch.nn.Module) -> torch.Tensor:
        rewards, grads, images = self.reward_and_grad(reward, rollout.latents, rollout.prompts)
        self.set_rewards(rollout, rewards, grads, images)
        return rewards

    # -- 3. corrected terminal-cost gradient --------------------------------------------------------------------
    @torch.no_grad()
    def prepare_update(self, rollout: Rollout) -> dict[str, float]:
        if self.cfg.terminal_score == TerminalScore.anchor:
            return {}
        x1, g_r = rollout.latents, rollout.extras["reward_grad"]
        embeds = rollout.embeds
        score = terminal_score(
            self.cfg.terminal_score,
            lambda x, t: self.pretrained_velocity_batched(x, t, embeds),
            x1,
            float(self.cfg.delta),
        )
        grad_g = corrected_terminal_grad(self.base, x1, g_r, score, self.reward_scale)
        rollout.extras["terminal_grad"] = grad_g
        self._step_metrics.update(
            {
                "soc/terminal_score_norm": float(score.flatten(1).norm(dim=1).mean()),
                "soc/terminal_grad_norm": float(grad_g.flatten(1).norm(dim=1).mean()),
            }
        )
        return {}

    # -- 4. regression on kernel samples ------------------------------------------------------------------------
    def targets(
        self, rollout: Rollout, samples: torch.Tensor, x_t: torch.Tensor, t: torch.Tensor, t_count: int
    ) -> torch.Tensor:
        """Velocity targets of the rows ``x_t`` (samples repeated ``t_count`` times)."""
        if self.cfg.terminal_score == TerminalScore.anchor:
            g_r = rollout.extras["reward_grad"][samples].repeat_interleave(t_count, dim=0)
            embeds = rollout.embeds.select(samples.repeat_interleave(t_count))
            with torch.no_grad():
                v_pre = self.pretrained_velocity(x_t, t, embeds).to(x_t.dtype)
            return v_pre + expand_time(self.base.target_coef(t), g_r) * (self.reward_scale * g_r)
        grad_g = rollout.extras["terminal_grad"][samples].repeat_interleave(t_count, dim=0)
        return velocity_target(self.base, x_t, t, grad_g)

    def backward(self, rollout: Rollout, samples: torch.Tensor, update_size: int) -> dict[str, torch.Tensor]:
        """The regression of every sample's K_t loss rows, whole samples per call of ``method.update_batch`` rows."""
        samples = samples.to(rollout.latents.device, non_blocking=True)  # the plan's pinned host indices
        totals: dict[str, torch.Tensor] = {}
        for part in self.loss_calls(samples, rollout.extras["loss_times"].shape[1]):
            add_sums(totals, self._loss_backward(rollout, part, update_size))
        return totals

    def _loss_backward(self, rollout: Rollout, samples: torch.Tensor, update_size: int) -> dict[str, torch.Tensor]:
        times = rollout.extras["loss_times"][samples]
        m, t_count = times.shape
        t = times.flatten()
        x1 = rollout.latents[samples].repeat_interleave(t_count, dim=0)
        x_t = BridgeKernel.sample(x1, t, rollout.extras["kernel_noise"][samples].flatten(0, 1))
        target = self.targets(rollout, samples, x_t, t, t_count)
        v = self.velocity(x_t, t, rollout.embeds.select(samples.repeat_interleave(t_count)))
        sq = self.squared_norm(v - target.to(v.dtype))
        if self.cfg.loss_weight == LossWeight.memoryless:
            sq = sq * self.schedule.loss_weight(t).to(sq.dtype)  # t is on the device
        return self.finish_loss(sq.view(m, t_count).mean(1), update_size)
