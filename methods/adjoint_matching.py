"""Adjoint Matching (Domingo-Enrich et al., ICLR 2025, arXiv:2409.08861) as a method of the shared trainer loop
(docs/methods/eam.md#adjoint-matching).

One iteration, per sample (B = prompts_per_step x group_size):

1. ``rollout``: K-step Euler–Maruyama memoryless SDE of the fine-tuned model from ``X_0 ~ N(0, I)`` on the uniform
   grid ``t_k = k / K`` (offset schedule, K = ``sampling_steps`` = 40), storing every state (no gradients); the loss
   timesteps are drawn here: the last ``loss_last_steps`` grid steps plus ``loss_random_steps`` random earlier ones.
2. ``score``: the denoised last state ``X_hat_1 = X_{K-1} + h v_pre(X_{K-1})`` (``denoise_last_step``; else ``X_K``) is
   decoded with gradients; the reward and ``grad r`` there.
3. ``prepare_update``: the lean adjoint ODE ``a_K = -lambda grad r``, integrated backward with K VJPs of the frozen
   base's memoryless drift at ``X_K..X_1`` (each step from the point it starts at, as AM does:
   :class:`methods.lean_adjoint.LeanAdjointSolver`); keeps ``a_k`` and ``v_pre(X_k)`` (a by-product of the VJP
   forward) at the loss timesteps, and ``v_pre(X_0)`` from one more forward (no VJP runs at ``X_0``).
4. ``backward``: ``|| (2 / sigma_k) (v_theta(X_k) - v_pre(X_k)) + sigma_k a_k ||^2``, averaged over the sample's loss
   timesteps, clipped per sample at ``loss_clip * lambda^2``.

Transformer passes per sample: K + 2 forwards (rollout, denoising, ``v_pre(X_0)``), K VJPs (forward + backward of the
frozen model), ``|S|`` forward + backward of the fine-tuned model for the loss.
"""

from __future__ import annotations

import torch

from methods.adjoint_matching_config import AdjointMatchingConfig
from methods.base import Rollout
from methods.lean_adjoint import LeanAdjointSolver
from methods.memoryless import expand_time
from methods.soc_base import SOCMethod
from methods.trajectory import Trajectory
from methods.update_rows import add_sums
from models.backbone import Backbone, host_randn


def am_loss_steps(n: int, k: int, last: int, random: int, generator: torch.Generator) -> torch.Tensor:
    """(n, random + last) indices on a K-step grid: per row, ``random`` distinct random steps among the first
    ``k - last``, then the last ``last`` steps (AM App. G.2's loss steps, secondhand; EAM's ``am_grid`` parity)."""
    tail = torch.arange(k - last, k).expand(n, -1)
    if random == 0:
        return tail.clone()
    early = torch.stack([torch.randperm(k - last, generator=generator)[:random] for _ in range(n)])
    return torch.cat([early, tail], dim=1)


class AdjointMatching(SOCMethod[AdjointMatchingConfig]):
    def __init__(self, cfg: AdjointMatchingConfig, backbone: Backbone):
        super().__init__(cfg, backbone)
        self.num_steps = int(cfg.sampling_steps)
        self.ts = self.schedule.grid(self.num_steps)
        # the grid on the compute device once: rollout, VJPs and the loss index it per call (a per-call move of the
        # host grid is a sync on CUDA; docs/performance.md#one-host-sync-per-update)
        self.ts_device = self.ts.to(backbone.device)
        self.solver = LeanAdjointSolver(self.schedule)

    # -- which grid steps enter the loss (AM App. G.2, secondhand) ---------------------------------------------
    @classmethod
    def loss_step_counts(cls, cfg: AdjointMatchingConfig) -> tuple[int, int]:
        """``(last, random)``: the last ``min(loss_last_steps, K)`` grid steps and ``min(loss_random_steps, rest)``
        random earlier ones enter the loss (fewer than asked when K is small, e.g. at CPU-demo scale)."""
        k = int(cfg.sampling_steps)
        last = min(int(cfg.loss_last_steps), k)
        return last, min(int(cfg.loss_random_steps), k - last)

    @classmethod
    def passes_per_sample(cls, cfg: AdjointMatchingConfig) -> tuple[int, int]:
        """K rollout forwards, the denoising forward (``denoise_last_step``), K VJPs of the frozen base (forward +
        backward) at ``X_K..X_1``, the base velocity at ``X_0`` (every sample, whether or not step 0 is among its loss
        steps: a count that does not depend on the draw, for under 1 % of the step's passes at K = 40) and a forward +
        backward per loss step."""
        k, loss = int(cfg.sampling_steps), sum(cls.loss_step_counts(cfg))
        return k + int(cfg.denoise_last_step) + k + 1 + loss, k + loss

    def loss_steps(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """(n, T) grid indices per sample (:meth:`loss_step_counts`), the random ones distinct, in grid order."""
        last, rand = self.loss_step_counts(self.cfg)
        return am_loss_steps(n, self.num_steps, last, rand, generator).sort(dim=1).values

    # -- 1. rollout ---------------------------------------------------------------------------------------------
    @torch.no_grad()
    def rollout(self, prompts: list[str], generator: torch.Generator) -> Rollout:
        expanded, keys = self.expand_prompts(prompts)
        embeds = self.backbone.encode_prompts(expanded)
        x = self.backbone.initial_noise(len(expanded), generator)
        b, k = x.shape[0], self.num_steps
        # every state: the lean adjoint takes a VJP at each grid point (docs/memory.md#chunked-rollouts)
        traj = Trajectory(b, k + 1, tuple(x.shape[1:]), x.dtype, x.device, offload=bool(self.cfg.trajectory_offload))
        traj.record(0, x)
        for i in range(k):
            t = self.ts_device[i].expand(b)
            v = self.velocity_batched(x, t, embeds)
            noise = host_randn(tuple(x.shape), generator, x.device, torch.float64).to(x.dtype)
            x = self.schedule.em_step(x, v, t, self.ts_device[i + 1] - self.ts_device[i], noise)
            traj.record(i + 1, x)
        return Rollout(
            prompts=expanded,
            group_keys=keys,
            embeds=embeds,
            images=None,
            latents=traj,
            train_steps=self.loss_steps(b, generator).to(x.device),
        )

    # -- 2. reward and its gradient at the (denoised) endpoint --------------------------------------------------
    def score(self, rollout: Rollout, reward: torch.nn.Module) -> torch.Tensor:
        traj, k = rollout.latents, self.num_steps
        if self.cfg.denoise_last_step:
            x_last = traj.state(k - 1)
            t_last = self.ts_device[k - 1].expand(x_last.shape[0])
            v = self.pretrained_velocity_batched(x_last, t_last, rollout.embeds)
            x_hat = x_last + float(self.ts[k] - self.ts[k - 1]) * v
        else:
            x_hat = traj.state(k)
        rewards, grads, images = self.reward_and_grad(reward, x_hat, rollout.prompts)
        self.set_rewards(rollout, rewards, grads, images)
        return rewards

    # -- 3. lean adjoint ----------------------------------------------------------------------------------------
    def prepare_update(self, rollout: Rollout) -> dict[str, float]:
        traj, steps = rollout.latents, rollout.train_steps
        assert steps is not None  # sample() sets the trained steps
        b, t_count = steps.shape
        shape = traj.shape[2:]
        adj = torch.empty((b, t_count, *shape), dtype=traj.dtype, device=steps.device)
        v_pre = torch.empty_like(adj)

        def vjp(k: int, a: torch.Tensor) -> torch.Tensor:
            out = torch.empty_like(a)
            t = self.ts_device[k].expand(b)
            for idx in self.chunks(b):
                x = traj.state(k, idx).detach().requires_grad_(True)
                with torch.enable_grad():
                    v = self.pretrained_velocity(x, t[idx], rollout.embeds.select(idx))
                    (g,) = torch.autograd.grad(v, x, grad_outputs=a[idx].to(v.dtype))
                out[idx] = g.to(a.dtype)
                rows, cols = (steps[idx] == k).nonzero(as_tuple=True)
                if rows.numel():
                    v_pre[idx[rows], cols] = v.detach()[rows].to(v_pre.dtype)
            return out

        def keep(k: int, a: torch.Tensor) -> None:
            rows, cols = (steps == k).nonzero(as_tuple=True)
            if rows.numel():
                adj[rows, cols] = a[rows]
            if k == self.num_steps:
                self._step_metrics["soc/adjoint_norm_t1"] = float(a.flatten(1).norm(dim=1).mean())

        a_terminal = -self.reward_scale * rollout.extras["reward_grad"]
        a0 = self.solver.solve(vjp, self.ts, a_terminal, keep=keep)
        # the solver's VJPs stop at X_1 (lean_adjoint.py), so step 0's base velocity takes its own forward
        x0 = traj.state(0).to(steps.device)
        v0 = self.pretrained_velocity_batched(x0, self.ts[0].expand(b), rollout.embeds)
        rows, cols = (steps == 0).nonzero(as_tuple=True)
        if rows.numel():
            v_pre[rows, cols] = v0[rows].to(v_pre.dtype)
        rollout.extras.update(adjoint=adj, v_pre=v_pre)
        self._step_metrics["soc/adjoint_norm_t0"] = float(a0.flatten(1).norm(dim=1).mean())
        return {}

    # -- 4. regression ------------------------------------------------------------------------------------------
    def backward(self, rollout: Rollout, samples: torch.Tensor, update_size: int) -> dict[str, torch.Tensor]:
        """The regression of every sample's loss rows, whole samples per call of ``method.update_batch`` rows."""
        samples = samples.to(rollout.latents.device, non_blocking=True)  # the plan's pinned host indices
        totals: dict[str, torch.Tensor] = {}
        assert rollout.train_steps is not None  # sample() sets the trained steps
        for part in self.loss_calls(samples, rollout.train_steps.shape[1]):
            add_sums(totals, self._loss_backward(rollout, part, update_size))
        return totals

    def _loss_backward(self, rollout: Rollout, samples: torch.Tensor, update_size: int) -> dict[str, torch.Tensor]:
        assert rollout.train_steps is not None  # sample() sets the trained steps
        steps = rollout.train_steps[samples]
        m, t_count = steps.shape
        x = rollout.latents[samples[:, None], steps].flatten(0, 1)
        t = self.ts_device[steps].flatten()
        embeds = rollout.embeds.select(samples.repeat_interleave(t_count))
        a = rollout.extras["adjoint"][samples].flatten(0, 1)
        v_pre = rollout.extras["v_pre"][samples].flatten(0, 1)
        v = self.velocity(x, t, embeds)
        u = self.schedule.control(v, v_pre.to(v.dtype), t)
        residual = u + expand_time(self.schedule.sigma(t), a) * a.to(u.dtype)
        per_sample = self.squared_norm(residual).view(m, t_count).mean(1)
        stats = self.finish_loss(per_sample, update_size)
        stats["soc/control_norm"] = u.detach().flatten(1).norm(dim=1).view(m, t_count).mean(1).sum()
        return stats
