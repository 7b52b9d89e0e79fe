"""DiffusionNFT (Zheng et al., arXiv:2509.16117; code NVlabs/DiffusionNFT) on the shared trainer loop.

Reinforcement on the *forward* process: the sampling policy ``v_old`` draws images with any ODE solver, only the
final latents and their rewards are kept, and the policy is trained by flow matching on noised copies of them, the
reward weighing an implicit positive and negative policy. Per step (``docs/methods/diffusion_nft.md`` has the
sources, line by line, and every choice their code leaves open):

1. ``rollout``: CFG-free samples (a CFG family's ``guidance_scale`` is set to 1) of ``v_old``
   (:class:`methods.old_policy.LaggingPolicy`) with ``method.sampler`` (:mod:`methods.ode_solvers`) on the family's
   sigma grid; no log-prob, no trajectory. Each sample draws the ``floor(timestep_fraction x N)`` grid times it
   trains (a random subset, their per-sample permutation) and a noise seed.
2. ``prepare_update``: advantages of the gathered rewards by prompt over the global std
   (:func:`methods.advantages.compute_advantages`, their ``PerPromptStatTracker`` with ``global_std``).
3. ``backward``: the update's (sample, trained time) rows, ``method.update_batch`` per transformer call
   (docs/performance.md#batched-trained-steps): ``x_t = (1 - sigma) x0 + sigma eps`` per row, ``v_old`` there (one
   swap of the lagging weights per call), the reference forward (``kl_beta`` > 0), the trained forward and one
   backward of :func:`methods.nft_loss.nft_loss`.
4. ``end_step``: ``v_old <- d v_old + (1 - d) v`` (:func:`methods.old_policy.old_policy_decay`).

Transformer passes per sample and step (:meth:`DiffusionNFT.passes_per_sample`): N rollout forwards, then per
trained time 2 forwards (``v_old``, ``v``) plus 1 with KL, and 1 backward.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import ContextManager, Iterator, TypeVar

import torch

from methods.advantages import advantage_keys, step_advantages
from methods.base import Method, Rollout
from methods.chunking import chunked_velocity
from methods.diffusion_nft_config import DiffusionNFTConfig
from methods.nft_loss import nft_loss, optimality_weight
from methods.ode_solvers import solve
from methods.old_policy import LaggingPolicy, old_policy_decay
from methods.schedule import make_sigmas, quantize_model_time
from methods.update_rows import add_sums, row_calls, rows_per_call, trained_rows
from models.backbone import Backbone, PromptEmbeds
from models.common import DiffusersBackbone

log = logging.getLogger(__name__)


@dataclass
class NoisedRows:
    """One transformer call's rows of an update: the sample of each row, its clean latents ``x0``, noise ``eps``, the
    noised ``x_t``, the row's grid sigma (float64), the rows' conditioning, and T, the trained times per sample."""

    rows: torch.Tensor
    x0: torch.Tensor
    noise: torch.Tensor
    xt: torch.Tensor
    sigma: torch.Tensor
    embeds: PromptEmbeds
    t_count: int


def noised_latents(x0: torch.Tensor, noise: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """The forward process ``x_sigma = (1 - sigma) x0 + sigma eps`` per row, sigma (r,) taken in float32 as the
    authors' pipelines hold it (DiffusionNFT's and AWM's)."""
    s = sigma.float().view(-1, *([1] * (x0.ndim - 1)))
    return (1.0 - s) * x0 + s * noise


#: the config of DiffusionNFT or of a method on its machinery (methods/awm.py)
NFTConfigT = TypeVar("NFTConfigT", bound=DiffusionNFTConfig)


class DiffusionNFT(Method[NFTConfigT]):
    def __init__(self, cfg: NFTConfigT, backbone: Backbone):
        super().__init__(cfg, backbone)
        if isinstance(backbone, DiffusersBackbone) and backbone.guidance_scale > 1.0:  # true CFG: only theirs
            # CFG-free by construction (their sample.guidance_scale=1.0, config/nft.py:64; their training forward has
            # no CFG path), so a sweep can share one model config with methods that sample with CFG
            log.warning(
                "method=%s samples and trains without classifier-free guidance: "
                "model.guidance_scale=%s is not used (set model.guidance_scale=1 to record that)",
                cfg.name,
                backbone.guidance_scale,
            )
            backbone.guidance_scale = 1.0
        self.sigmas = make_sigmas(cfg.schedule, int(cfg.sampling_steps), float(cfg.shift), backbone)
        # indexed per update call: on the compute device once, not moved per call (a sync on CUDA each time)
        self.device_sigmas = self.sigmas.to(backbone.device)
        self.old_policy = LaggingPolicy(backbone.transformer)  # v_old = v at the start (their lines 576-580)
        self._decay = 0.0

    # -- config -------------------------------------------------------------------------------------------------
    @classmethod
    def needs_reference(cls, cfg: NFTConfigT) -> bool:
        return cfg.kl_beta > 0

    @classmethod
    def passes_per_sample(cls, cfg: NFTConfigT) -> tuple[int, int]:
        """The N-step rollout, then per trained time the v_old and the trained forward (and the reference one with
        KL) and one backward."""
        n = int(cfg.sampling_steps)
        trained = int(cfg.timestep_fraction * n)
        return n + trained * (2 + (1 if cfg.kl_beta > 0 else 0)), trained

    def num_trained(self) -> int:
        return int(self.cfg.timestep_fraction * self.cfg.sampling_steps)

    # -- rollout ------------------------------------------------------------------------------------------------
    def rollout_time(self, sigma: torch.Tensor) -> torch.Tensor:
        return quantize_model_time(sigma) if self.cfg.quantize_rollout_time else sigma

    @torch.no_grad()
    def rollout(self, prompts: list[str], generator: torch.Generator) -> Rollout:
        g, bb = int(self.cfg.group_size), self.backbone
        expanded = [p for p in prompts for _ in range(g)]
        first = self.world.rank * len(prompts)  # group keys unique across ranks
        keys = [first + k for k in range(len(prompts)) for _ in range(g)]
        embeds = bb.encode_prompts(list(prompts)).repeat_rows(g)  # one conditioning per prompt (docs/memory.md)
        x = bb.initial_noise(len(expanded), generator)  # fresh noise per sample (their prepare_latents)

        def velocity(z: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
            return chunked_velocity(bb, z, self.rollout_time(sigma).float(), embeds, self.cfg.rollout_chunk)

        with self.sampling_policy():
            x = solve(self.cfg.sampler, self.sigmas, velocity, x).float()
        b = len(expanded)
        times = self.draw_train_steps(b, generator)
        seeds = torch.randint(0, 2**62, (b,), generator=generator).tolist()  # host ints: read in the update
        return Rollout(
            prompts=expanded,
            group_keys=keys,
            embeds=embeds,
            images=None,
            latents=x,
            decode_latents=x,
            train_steps=times.to(x.device),
            extras={"noise_seeds": seeds},
        )

    def sampling_policy(self) -> ContextManager[None]:
        """The weights the rollout samples with: the lagging ``v_old``."""
        return self.old_policy.active()

    def draw_train_steps(self, b: int, generator: torch.Generator) -> torch.Tensor:
        """(b, T) grid indices each sample trains: a random subset of ``floor(fraction x N)`` distinct times."""
        n = int(self.cfg.sampling_steps)
        return torch.argsort(torch.rand(b, n, generator=generator), dim=1)[:, : self.num_trained()]

    # -- advantages ---------------------------------------------------------------------------------------------
    def prepare_update(self, rollout: Rollout) -> dict[str, float]:
        """Advantages over the whole step (by prompt string or by group), from every rank's rewards."""
        return step_advantages(
            rollout,
            advantage_keys(rollout, self.cfg.advantage),
            self.cfg.advantage,
            self.cfg.global_std,
            self.cfg.adv_clip_max,
            self.world,
        )

    # -- loss ---------------------------------------------------------------------------------------------------
    def forward_noise(self, rollout: Rollout, samples: torch.Tensor) -> torch.Tensor:
        """(m, T, *latent) fresh Gaussian noise per sample and trained time, from the sample's seed: the same on
        any rank and in any split of the update into transformer calls."""
        return self._noise(rollout, [rollout.extras["noise_seeds"][i] for i in samples.tolist()])

    def _noise(self, rollout: Rollout, seeds: list[int]) -> torch.Tensor:
        assert rollout.train_steps is not None  # sample() sets the trained steps
        shape = (rollout.train_steps.shape[1], *rollout.latents.shape[1:])
        device = rollout.latents.device
        # each sample's draw written into one pinned buffer and queued to the device without waiting (a pageable
        # copy would sync once per transformer call; the draws are torch.randn's, models.backbone.host_randn)
        noise = torch.empty((len(seeds), *shape), dtype=torch.float32, pin_memory=device.type == "cuda")
        for row, s in zip(noise, seeds):
            row.normal_(generator=torch.Generator().manual_seed(int(s)))
        return noise.to(device, non_blocking=True)

    def noised_rows(self, rollout: Rollout, samples: torch.Tensor) -> Iterator[NoisedRows]:
        """The update's (sample, trained time) rows, ``method.update_batch`` per transformer call, each call's rows
        noised by the forward process ``x_t = (1 - sigma) x0 + sigma eps`` with the samples' own noise."""
        seeds = [rollout.extras["noise_seeds"][i] for i in samples.tolist()]  # the plan's host-side indices
        samples = samples.to(rollout.latents.device, non_blocking=True)  # the plan's pinned host indices
        assert rollout.train_steps is not None  # set by sample()
        steps = rollout.train_steps[samples]
        t_count = steps.shape[1]
        row_samples, row_steps = trained_rows(samples, steps)
        for call in row_calls(len(row_samples), rows_per_call(self.cfg.update_batch, self.backbone)):
            first, last = call.start // t_count, (call.stop - 1) // t_count  # the samples this call touches
            noise = self._noise(rollout, seeds[first : last + 1]).flatten(0, 1)
            noise = noise[call.start - first * t_count : call.stop - first * t_count]
            rows = row_samples[call]
            x0 = rollout.latents[rows]
            sigma = self.device_sigmas[row_steps[call]]  # (r,) float64
            xt = noised_latents(x0, noise, sigma)
            yield NoisedRows(rows, x0, noise, xt, sigma, rollout.embeds.select(rows), t_count)

    def backward(self, rollout: Rollout, samples: torch.Tensor, update_size: int) -> dict[str, torch.Tensor]:
        """Every (sample, trained time) row of the update, ``method.update_batch`` rows per transformer call: per
        call one swap to the lagging weights for ``v_old``, the reference forward (``kl_beta`` > 0), the trained
        forward and one backward of :func:`methods.nft_loss.nft_loss`."""
        bb, cfg = self.backbone, self.cfg
        assert rollout.advantages is not None  # set by prepare_update()
        totals: dict[str, torch.Tensor] = {}
        for c in self.noised_rows(rollout, samples):
            with torch.no_grad():
                with self.old_policy.active():
                    v_old = bb.velocity(c.xt, c.sigma.float(), c.embeds)
                v_ref = None
                if cfg.kl_beta > 0:
                    with bb.reference():
                        v_ref = bb.velocity(c.xt, c.sigma.float(), c.embeds)
            v = bb.velocity(c.xt, c.sigma.float(), c.embeds)
            r = optimality_weight(rollout.advantages[c.rows], float(cfg.adv_clip_max), cfg.adv_mode)
            loss, stats = nft_loss(
                v, v_old, c.x0, c.xt, c.sigma, r, float(cfg.beta), float(cfg.adv_clip_max), float(cfg.kl_beta), v_ref
            )
            (loss.sum() / (update_size * c.t_count)).backward()
            _accumulate(totals, loss, stats, 1.0 / c.t_count)
        return totals

    # -- after the updates --------------------------------------------------------------------------------------
    def end_step(self, step: int) -> None:
        """Move v_old towards v; the decay follows the optimizer steps taken so far, skipped ones included."""
        steps = (step + 1) * int(self.cfg.updates_per_rollout)
        self._decay = old_policy_decay(
            steps, int(self.cfg.old_decay_flat), float(self.cfg.old_decay_rate), float(self.cfg.old_decay_max)
        )
        self.old_policy.update(self._decay)

    def step_metrics(self) -> dict[str, float]:
        return {"nft/old_decay": self._decay}

    def state_dict(self) -> dict[str, torch.Tensor]:
        return self.old_policy.state_dict()


def _accumulate(
    totals: dict[str, torch.Tensor], loss: torch.Tensor, stats: dict[str, torch.Tensor], weight: float
) -> None:
    """Per-sample sums weighted by 1/T, which the trainer divides by the number of samples (device tensors)."""
    sums = {
        "loss": loss.detach().sum(),
        "nft/policy_loss": stats["policy_loss"].sum(),
        "nft/old_deviation": stats["old_deviation"].sum(),
    }
    if stats.get("kl") is not None:
        sums["nft/kl_ref"] = stats["kl"].sum()
    add_sums(totals, {k: weight * v.detach() for k, v in sums.items()})
