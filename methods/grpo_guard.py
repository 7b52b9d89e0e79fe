"""GRPO-Guard (arXiv:2510.22319; docs/methods/grpo_guard.md): Flow-GRPO whose importance ratio is normalised per step
(RatioNorm, Eq. 8) and whose per-step losses are reweighted across timesteps (Eq. 12).

With ``s = g sqrt(-Delta)`` the step's std, ``b = mean_D (mu_theta - mu_old)^2 / (2 s^2)`` and ``log rho`` the
Gaussian log-ratio, the ratio is ``exp(s (log rho + b))`` and each row's PPO-clipped loss is divided by ``-Delta``.
``mu_old`` is the rollout policy's mean of the transition: the rollout records it for the trained steps
(``rollout.extras["old_mean"]``, one latent per trained step, as the trajectory keeps). The loss is pinned to
``GRPOGuardLoss.compute_loss`` of verl-project/verl-omni @a1139ba (tests/test_grpo_guard.py)."""

from __future__ import annotations

import torch

from methods.base import Rollout
from methods.flow_grpo import FlowGRPO
from methods.grpo_guard_config import GRPOGuardConfig
from methods.sde import FlowSDEScheduler, SDEStepOutput
from models.backbone import Backbone


def guard_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    mean: torch.Tensor,
    old_mean: torch.Tensor,
    g: torch.Tensor,
    sqrt_dt: torch.Tensor,
    clip_range: float,
    adv_clip_max: float,
    ratio_norm: bool = True,
    grad_reweight: bool = True,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-row GRPO-Guard loss (m,) and its detached statistics (as :func:`methods.losses.ppo_clip_loss`).

    ``g`` (m,) is the step's diffusion coefficient (the reference's ``std_dev_t``), ``sqrt_dt`` (m,) ``sqrt(-Delta)``;
    ``mean`` / ``old_mean`` (m, *latent) the transition's mean under the current and the rollout policy. Per row, so a
    call may pack rows of different steps; on rows of one step the mean over rows is the reference's loss."""
    dtype = log_prob.dtype
    adv = advantages.to(dtype).clamp(-adv_clip_max, adv_clip_max)
    log_ratio = log_prob - old_log_prob.to(dtype)
    if ratio_norm:
        scale = (sqrt_dt * g).to(dtype)
        drift = (mean - old_mean.to(mean.dtype)).pow(2).flatten(1).mean(1).to(dtype)
        bias = drift / (2 * scale**2)
        ratio = torch.exp((log_ratio + bias) * scale)
    else:
        bias = torch.zeros_like(log_ratio)
        ratio = torch.exp(log_ratio)
    unclipped = -adv * ratio
    clipped = -adv * torch.clamp(ratio, 1.0 - clip_range, 1.0 + clip_range)
    loss = torch.maximum(unclipped, clipped)
    if grad_reweight:
        loss = loss / sqrt_dt.to(dtype) ** 2
    with torch.no_grad():
        stats = {
            "ratio": ratio.detach(),
            "clipped": ((ratio - 1.0).abs() > clip_range).to(dtype),
            "approx_kl": 0.5 * log_ratio.detach() ** 2,
            "ratio_bias": bias.detach(),
        }
    return loss, stats


class _MeanRecordingSDE(FlowSDEScheduler):
    """The sampler's SDE, which keeps each step's mean while ``recording`` is a list (the rollout's calls, in order)."""

    recording: list[torch.Tensor] | None = None

    def step(self, sample, velocity, index, stochastic=True, noise=None, generator=None) -> SDEStepOutput:
        out = super().step(sample, velocity, index, stochastic, noise, generator)
        if self.recording is not None:
            self.recording.append(out.mean.detach())
        return out


class GRPOGuard(FlowGRPO[GRPOGuardConfig]):
    def __init__(self, cfg: GRPOGuardConfig, backbone: Backbone):
        super().__init__(cfg, backbone)
        self.recorder = _MeanRecordingSDE(self.sigmas, cfg.noise_kernel, cfg.eta)
        self.sde = self.recorder

    @torch.no_grad()
    def rollout(self, prompts: list[str], generator: torch.Generator) -> Rollout:
        """Flow-GRPO's rollout, keeping the rollout policy's mean of every trained transition (steps 0..T-1)."""
        trained = self.trained_per_sample(self.cfg)
        calls: list[torch.Tensor] = []
        self.recorder.recording = calls
        try:
            rollout = super().rollout(prompts, generator)
        finally:
            self.recorder.recording = None
        b = len(prompts) * int(self.cfg.group_size)
        means: list[torch.Tensor] = []
        step: list[torch.Tensor] = []
        rows = 0
        for m in calls:  # each step's calls cover rows 0..B-1 in order (methods.chunking.sample_chunks)
            if len(means) < trained:
                step.append(m)
            rows += m.shape[0]
            if rows == b:
                if len(means) < trained:
                    means.append(torch.cat(step))
                step, rows = [], 0
        rollout.extras["old_mean"] = torch.stack(means, dim=1)  # (B, T, *latent): column j is step j
        return rollout

    def transition_loss(
        self, rollout: Rollout, samples: torch.Tensor, index: torch.Tensor, log_prob: torch.Tensor, mean: torch.Tensor
    ):
        """:func:`guard_loss` as the policy term: it needs the transition's means, new and old."""
        assert rollout.log_probs is not None and rollout.advantages is not None
        sqrt_dt = torch.sqrt(self.sde.sigma(index) - self.sde.table(index.device)[index + 1])
        return guard_loss(
            log_prob,
            rollout.log_probs[samples, index],
            rollout.advantages[samples],
            mean,
            rollout.extras["old_mean"][samples, index],
            self.sde.diffusion_coef(index),
            sqrt_dt,
            self.cfg.clip_range,
            self.cfg.adv_clip_max,
            bool(self.cfg.ratio_norm),
            bool(self.cfg.grad_reweight),
        )
