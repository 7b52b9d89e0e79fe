"""Toy backbones, schedulers and configs for the Flash-GRPO invariants (docs/methods/flash_grpo.md#tested-invariants).

* :class:`ToyBackbone`: a 2-layer MLP "transformer" over a (2, 3, 4, 4) latent (D = 96), optionally with true CFG
  (two transformer calls per velocity, as SD3.5 / Wan / Qwen-Image), in any dtype.
* :class:`IdentityBackbone`: ``v = theta``, a learnable latent-shaped tensor (the model of invariants 6-7).
* ``wan_unipc(n)``: the real diffusers scheduler of Wan2.1 (UniPC flow sigmas, shift 3, final sigma 0).
"""

from __future__ import annotations

import torch
from torch import nn

from models.backbone import Backbone, PromptEmbeds

LATENT = (2, 3, 4, 4)


def wan_unipc(num_steps: int = 20, shift: float = 3.0):
    from diffusers import UniPCMultistepScheduler

    sched = UniPCMultistepScheduler(
        use_flow_sigmas=True, flow_shift=shift, final_sigmas_type="zero", prediction_type="flow_prediction"
    )
    sched.set_timesteps(num_steps)
    return sched


def sd3_euler(num_steps: int = 10, shift: float = 3.0):
    from diffusers import FlowMatchEulerDiscreteScheduler

    sched = FlowMatchEulerDiscreteScheduler(shift=shift)
    sched.set_timesteps(num_steps)
    return sched


class ToyTransformer(nn.Module):
    """``v = MLP([x, sigma, text])`` element-wise over the flattened latent (first input named like diffusers')."""

    def __init__(self, d: int, text_dim: int = 4, hidden: int = 32):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d + 1 + text_dim, hidden), nn.Tanh(), nn.Linear(hidden, d))

    def forward(self, hidden_states, timestep, text):
        flat = hidden_states.flatten(1)
        out = self.net(torch.cat([flat, timestep[:, None].to(flat.dtype), text.to(flat.dtype)], 1))
        return (out.view_as(hidden_states),)


class ParamTransformer(nn.Module):
    """``v = theta`` for every sample (the gradient of a log-prob in theta is its gradient in v)."""

    def __init__(self, shape, dtype):
        super().__init__()
        self.theta = nn.Parameter(torch.randn(shape, dtype=dtype, generator=torch.Generator().manual_seed(5)))

    def forward(self, hidden_states, timestep, text):
        return (self.theta.expand_as(hidden_states),)


class ToyBackbone(Backbone):
    """Args:
    cfg_scale: None for no CFG (one call per velocity, like Flux's embedded guidance), else true CFG
        ``v_u + w (v_c - v_u)`` with an empty-prompt branch (two calls, like Wan's 4.5).
    dtype: latents, weights and velocities.
    identity: use :class:`ParamTransformer` (``v = theta``) instead of the MLP.
    """

    name = "toy"

    def __init__(
        self, cfg_scale: float | None = None, dtype: torch.dtype = torch.float32, identity: bool = False, seed: int = 0
    ):
        torch.manual_seed(seed)
        d = 1
        for s in LATENT:
            d *= s
        self.d, self.dtype, self.cfg_scale = d, dtype, cfg_scale
        self.device = torch.device("cpu")
        self.transformer = (ParamTransformer(LATENT, dtype) if identity else ToyTransformer(d)).to(dtype)

    def encode_prompts(self, prompts):
        text = torch.stack(
            [torch.randn(4, generator=torch.Generator().manual_seed(sum(map(ord, p)))) for p in prompts]
        ).to(self.dtype)
        return PromptEmbeds({"text": text})

    @property
    def latent_shape(self):
        return LATENT

    def initial_noise(self, n, generator=None):
        return torch.randn((n, *LATENT), generator=generator, dtype=torch.float32).to(self.dtype)

    def velocity(self, latents, sigma, embeds):
        text = embeds.tensors["text"]
        v_c = self.transformer(hidden_states=latents, timestep=sigma, text=text)[0]
        if self.cfg_scale is None:
            return v_c
        v_u = self.transformer(hidden_states=latents, timestep=sigma, text=torch.zeros_like(text))[0]
        return v_u + self.cfg_scale * (v_c - v_u)

    def decode(self, latents):
        return torch.sigmoid(latents[:, 0].float())  # (B, 3, 4, 4) "images" in [0, 1]


class IdentityBackbone(ToyBackbone):
    """``v = theta`` (invariants 6-7): per-sample gradients in theta are gradients in the velocity."""

    def __init__(self, dtype: torch.dtype = torch.float64):
        super().__init__(dtype=dtype, identity=True)


class MeanReward(nn.Module):
    """Mean of the red channel: a cheap reward with spread within a group."""

    def forward(self, images, prompts):
        return images[:, 0].mean((1, 2))


def flash_method(
    backbone: Backbone, overrides: list[str] | None = None, sigmas: torch.Tensor | None = None, monkeypatch=None
):
    """A :class:`FlashGRPO` from conf/method/flash_grpo.yaml (+ ``overrides``); ``sigmas`` replaces the schedule
    (e.g. Wan's UniPC sigmas) through ``monkeypatch``."""
    from omegaconf import OmegaConf

    from conftest import compose
    from launcher.validate import validate
    from methods.flash_grpo import FlashGRPO

    cfg = compose(["method=flash_grpo", *[f"method.{o}" for o in (overrides or [])]])
    if sigmas is not None:
        monkeypatch.setattr("methods.grpo.make_sigmas", lambda *a, **k: sigmas.clone())
    validate(cfg)
    return FlashGRPO(OmegaConf.to_object(cfg.method), backbone)
