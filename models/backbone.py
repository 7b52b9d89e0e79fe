"""The interface every model family implements, so that methods never touch family details.

A backbone owns the trainable transformer and its frozen companions (text encoders, VAE). Latents are kept in the
form the transformer consumes (e.g. Flux's 2x2-packed tokens), so the SDE math and log-probs see exactly the
tensor the model predicts for; ``decode`` undoes the packing.
"""

from __future__ import annotations

import abc
import contextlib
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch
from torch import nn

from rewardflow.errors import ConfigErrors


def host_randn(
    shape: tuple[int, ...], generator: torch.Generator | None, device: torch.device, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Standard normal ``dtype`` drawn on the CPU (a seed gives the same noise on every device; the same draws as
    ``torch.randn``), then moved to ``device``: on CUDA from pinned memory with ``non_blocking``, so the host queues
    the copy and goes on (from pageable memory the copy would wait for the device, a sync per sampling step)."""
    pin = torch.device(device).type == "cuda"
    noise = torch.empty(shape, dtype=dtype, pin_memory=pin).normal_(generator=generator)
    return noise.to(device, non_blocking=True)  # on the CPU the copy is done when it returns


@dataclass
class PromptEmbeds:
    """Batched text conditioning: every tensor has the batch on dim 0 (shared tensors go in ``shared``).

    With ``rows``, ``entries`` hold one entry per distinct prompt and row ``i`` of the batch reads entry ``rows[i]``
    (a group of G samples shares its prompt's conditioning instead of G copies, docs/memory.md#chunked-rollouts);
    :attr:`tensors` and :meth:`select` give per-row tensors either way. ``rows`` lives with the entries, on the
    compute device, so selecting a chunk's rows moves nothing from the host (a move of a host index table is a device
    sync on CUDA, once per transformer call: docs/performance.md#one-host-sync-per-update).
    """

    entries: dict[str, torch.Tensor]
    shared: dict[str, torch.Tensor] = field(default_factory=dict)
    rows: torch.Tensor | None = None

    @property
    def tensors(self) -> dict[str, torch.Tensor]:
        if self.rows is None:
            return self.entries
        return {k: v[self.rows] for k, v in self.entries.items()}

    @property
    def device(self) -> torch.device:
        return next(iter(self.entries.values())).device

    def repeat_rows(self, repeats: int) -> PromptEmbeds:
        """Each row ``repeats`` times in a row (``repeat_interleave``), without copying the conditioning."""
        rows = self.rows if self.rows is not None else torch.arange(len(self), device=self.device)
        return PromptEmbeds(self.entries, self.shared, rows.repeat_interleave(int(repeats)))

    def select(self, index: torch.Tensor | list[int]) -> PromptEmbeds:
        """The rows ``index`` (a device tensor, as the methods' sample indices are; a list is copied once)."""
        index = torch.as_tensor(index, dtype=torch.long, device=self.device)
        if self.rows is not None:
            index = self.rows[index]
        return PromptEmbeds({k: v[index] for k, v in self.entries.items()}, self.shared)

    @staticmethod
    def cat(items: list[PromptEmbeds]) -> PromptEmbeds:
        keys = items[0].entries.keys()
        return PromptEmbeds({k: torch.cat([it.tensors[k] for it in items]) for k in keys}, items[0].shared)

    def to(self, device: torch.device | str) -> PromptEmbeds:
        return PromptEmbeds(
            {k: v.to(device) for k, v in self.entries.items()},
            {k: v.to(device) for k, v in self.shared.items()},
            None if self.rows is None else self.rows.to(device),
        )

    def __len__(self) -> int:
        return len(self.rows) if self.rows is not None else next(iter(self.entries.values())).shape[0]


class Backbone(abc.ABC):
    """A model family: prompt encoding, velocity, latent layout and decoding. The trainer builds one from its typed
    config: ``BackboneCls(cfg, keep_reference=...)``.

    Attributes:
        transformer: the trainable velocity network (wrapped by FSDP / peft as configured).
        device: where the transformer runs.
        name: family name used in logs.
    """

    transformer: nn.Module
    device: torch.device
    name: str = "backbone"
    #: the attribute holding the guidance that :meth:`velocity` applies (``guidance_scale``: true CFG; FLUX.1-dev:
    #: ``guidance``, its distilled guidance embedding); None: the family has no guidance
    guidance_attr: str | None = None
    #: :meth:`decode` returns frames (B, F, 3, H, W) rather than images (B, 3, H, W)
    video: bool = False

    # -- config -------------------------------------------------------------------------------------------------
    @classmethod
    def check_with_code(cls, cfg: Any, errors: ConfigErrors) -> None:
        """The config-check hook for what needs this family's code or files (run by ``launcher.validate`` before
        anything is built, after the config class's ``check``, which holds the rules on values alone). ``cfg`` is
        the whole run config (typed; the model's is ``cfg.model``); a family's hook calls this first."""

    # -- conditioning -------------------------------------------------------------------------------------------
    @abc.abstractmethod
    def encode_prompts(self, prompts: list[str]) -> PromptEmbeds:
        """Text conditioning for ``prompts`` (cached per prompt string; text encoders are frozen)."""

    # -- latents ------------------------------------------------------------------------------------------------
    @property
    @abc.abstractmethod
    def latent_shape(self) -> tuple[int, ...]:
        """Per-sample latent shape in the transformer's layout (no batch dim)."""

    @property
    def rows_per_sample(self) -> int:
        """Transformer rows one sample's velocity costs (2 with true CFG: ``[uncond, cond]`` in one forward)."""
        return 1

    def initial_noise(self, n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """Standard normal fp32 latents of ``n`` samples (drawn on CPU so seeds give the same noise everywhere)."""
        return host_randn((n, *self.latent_shape), generator, self.device)

    @abc.abstractmethod
    def velocity(self, latents: torch.Tensor, sigma: torch.Tensor, embeds: PromptEmbeds) -> torch.Tensor:
        """Predicted velocity ``v = d x / d sigma`` for ``latents`` at noise level ``sigma`` (B,) in [0, 1].

        The family's timestep scale (sigma vs 1000 sigma), guidance and packing are handled here.
        """

    @abc.abstractmethod
    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """Images (B, 3, H, W) in [0, 1] (or frames (B, F, 3, H, W) for video). Differentiable; callers that do
        not need gradients wrap it in ``torch.no_grad``."""

    # -- training -----------------------------------------------------------------------------------------------
    def transformer_modules(self) -> list[nn.Module]:
        """Every module that evaluates the velocity (the policy and a separate frozen reference, if any); the
        trainer counts transformer passes on these."""
        return [self.transformer]

    def trainable_parameters(self) -> Iterator[nn.Parameter]:
        return (p for p in self.transformer.parameters() if p.requires_grad)

    @contextlib.contextmanager
    def reference(self) -> Iterator[None]:
        """Context in which :meth:`velocity` evaluates the frozen reference (pretrained) policy."""
        raise NotImplementedError(f"{type(self).__name__} keeps no reference policy")
        yield  # pragma: no cover

    @contextlib.contextmanager
    def guidance_override(self, value: float | None) -> Iterator[None]:
        """Context in which :meth:`velocity` (and :meth:`encode_prompts`, which adds the negative prompt when CFG
        turns on) uses guidance ``value``; None keeps the configured one. Evaluation samples with the family's
        inference guidance this way, whatever the training guidance is (``eval.guidance``)."""
        if value is None:
            yield
            return
        if self.guidance_attr is None:
            raise ValueError(f"{type(self).__name__} has no guidance to set")
        configured = getattr(self, self.guidance_attr)
        setattr(self, self.guidance_attr, float(value))
        try:
            yield
        finally:
            setattr(self, self.guidance_attr, configured)

    def sigmas(self, num_steps: int, shift: float) -> torch.Tensor:
        """The N + 1 sigmas (float64, last 0) of the family's own sampler, set up as its pipeline does
        (``method.schedule=scheduler``); ``shift`` is the static shift where the family's grid takes one. Default:
        diffusers' ``FlowMatchEulerDiscreteScheduler`` with that shift (:mod:`models.sigma_grids`)."""
        from models.sigma_grids import static_shift_sigmas

        return static_shift_sigmas(num_steps, shift)

    # -- optional capabilities of the model families (the diffusers families: their mixins, see models/common.py) --
    def encode_images(self, images: torch.Tensor) -> torch.Tensor:
        """Images (B, 3, H, W) (or frames (B, F, 3, H, W)) in [0, 1] -> latents in the transformer's layout; the
        inverse of :meth:`decode`."""
        raise NotImplementedError(f"{type(self).__name__} cannot encode images")

    def parallelize(self, mesh, reshard_after_forward: bool = True, mp_policy=None) -> None:
        """Shard the trainable transformer with FSDP2 (call on every rank, before building the optimizer); the
        options as :meth:`models.sharding.ShardingMixin.parallelize` takes them."""
        raise NotImplementedError(f"{type(self).__name__} does not support FSDP sharding")

    def save_pretrained(self, save_directory):
        """Export the fine-tuned weights in a format diffusers / peft load (call on every rank under FSDP)."""
        raise NotImplementedError(f"{type(self).__name__} cannot export its weights")
