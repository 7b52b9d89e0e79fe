"""The time-convention adapter between the stochastic-optimal-control (SOC) math and a backbone
(docs/methods/eam.md#time-convention).

The SOC methods (``method=adjoint_matching``, ``method=eam``) are written in Adjoint Matching's time: ``t`` in
[0, 1] with ``t = 0`` noise and ``t = 1`` data, ``X_t = t X_1 + (1 - t) X_0`` and the velocity
``v_AM(x, t) = d X_t / d t``. Backbones (:class:`models.backbone.Backbone`) speak diffusers' sigma convention:
``velocity(latents, sigma, embeds)`` returns ``d x / d sigma`` at noise level ``sigma`` (1 noise ... 0 data), with the
family's timestep scale (``sigma`` for Flux/Qwen-Image, ``1000 sigma`` for SD3, Wan's own) handled inside the backbone.

This module is the one place where the two meet. Every current backbone shares the sigma convention, so the default
adapter is :class:`SigmaConvention`: ``sigma = 1 - t`` and ``v_AM(x, t) = -velocity(x, 1 - t)``. A family whose
backbone does something else registers its own adapter, without touching the methods::

    register_time_convention("models.wan.WanBackbone", MyWanConvention())   # by class or dotted class name

The lookup walks the backbone's class hierarchy (most specific first), so subclasses inherit their family's adapter.
"""

from __future__ import annotations

import torch

from models.backbone import Backbone, PromptEmbeds


class TimeConvention:
    """Adapter from AM time to a backbone. Subclass and override :meth:`model_sigma` / :meth:`velocity`."""

    def model_sigma(self, t: torch.Tensor) -> torch.Tensor:
        """The backbone's noise level for AM time ``t`` (B,)."""
        raise NotImplementedError

    def velocity(self, backbone: Backbone, x: torch.Tensor, t: torch.Tensor, embeds: PromptEmbeds) -> torch.Tensor:
        """``v_AM(x, t)`` (same shape as ``x``) for per-sample AM times ``t`` (B,)."""
        raise NotImplementedError

    def euler_step(self, x: torch.Tensor, v_am: torch.Tensor, t: torch.Tensor, t_next: torch.Tensor) -> torch.Tensor:
        """One deterministic Euler step ``x + (t_next - t) v_AM``; equals diffusers' ``x + (sigma_next - sigma) out``."""
        h = (t_next - t).to(x.dtype).reshape(-1, *([1] * (x.dim() - 1)))
        return x + h * v_am


class SigmaConvention(TimeConvention):
    """``sigma = 1 - t``; the backbone predicts ``d x / d sigma``, so ``v_AM = -velocity(x, 1 - t)``."""

    def model_sigma(self, t: torch.Tensor) -> torch.Tensor:
        return 1.0 - t

    def velocity(self, backbone, x, t, embeds):
        sigma = self.model_sigma(t)
        sigma = sigma.to(x.dtype) if sigma.device == x.device else sigma.to(x.device, x.dtype)
        return -backbone.velocity(x, sigma, embeds).to(x.dtype)


DEFAULT_CONVENTION = SigmaConvention()
_REGISTRY: dict[str, TimeConvention] = {}


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def register_time_convention(backbone_cls: type | str, convention: TimeConvention) -> None:
    """Use ``convention`` for ``backbone_cls`` (a class or its dotted name) and its subclasses."""
    _REGISTRY[backbone_cls if isinstance(backbone_cls, str) else _qualname(backbone_cls)] = convention


def time_convention(backbone: Backbone) -> TimeConvention:
    """The adapter for ``backbone``: the most specific registered one in its class hierarchy, else the default."""
    for cls in type(backbone).__mro__:
        conv = _REGISTRY.get(_qualname(cls))
        if conv is not None:
            return conv
    return DEFAULT_CONVENTION


def velocity_am(backbone: Backbone, x: torch.Tensor, t: torch.Tensor, embeds: PromptEmbeds) -> torch.Tensor:
    """``v_AM(x, t)`` of ``backbone`` (whatever policy is active: fine-tuned, or the reference inside
    ``backbone.reference()``)."""
    return time_convention(backbone).velocity(backbone, x, t, embeds)
