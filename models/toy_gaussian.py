"""A Gaussian toy backbone whose pretrained velocity is known in closed form (docs/methods/eam.md#the-gaussian-toy).

The "pretrained model" generates ``N(mu0, diag(var0))`` in ``dim`` dimensions: its rectified-flow velocity is
analytic, ``v_AM(x, t) = mu + V_t' / (2 V_t) (x - t mu)`` with ``V_t = t^2 var0 + (1 - t)^2``. The trainable
"transformer" is that analytic velocity plus a small MLP of ``(x, time features)`` whose output layer starts at zero,
so the fine-tuned model starts exactly at the pretrained one. Fine-tuning is ``full`` (every MLP weight; the frozen
base is a copy) or ``lora`` (peft adapters on the MLP's linear layers; the base is the same module with the adapters
disabled) -- the same two modes, and the same ``reference()`` contract, as the real families.

It plugs into the trainer like any backbone: prompts are ignored (unconditional), ``velocity`` follows the sigma
convention of :class:`models.backbone.Backbone` (``d x / d sigma``, sigma = 1 noise), and ``decode`` shows a latent
of ``dim = 3 k`` numbers as a (3, 1, k) "image" whose pixel values are the coordinates themselves (not clamped), so a
reward on images is a function of the latent. Computations run in ``dtype`` (float64 by default).
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import nn

from models.backbone import Backbone, PromptEmbeds
from models.backbone_config import Finetune
from models.frozen_reference import FrozenReference
from models.toy_gaussian_config import ToyGaussianModelConfig
from rewardflow.dtypes import torch_dtype


def _per_dim(values: Sequence[float] | float, dim: int, what: str) -> torch.Tensor:
    v = torch.as_tensor(values, dtype=torch.float64).flatten()
    if v.numel() == 1:
        return v.expand(dim).clone()
    if v.numel() != dim:
        raise ValueError(f"model.{what} needs 1 or dim={dim} values (got {v.numel()})")
    return v


def gaussian_velocity_am(x: torch.Tensor, t: torch.Tensor, mu: torch.Tensor, var: torch.Tensor) -> torch.Tensor:
    """Rectified-flow velocity of data ``N(mu, diag var)`` in AM time (x: (B, d), t: (B,))."""
    t = t.to(x.dtype)[:, None]
    mu, var = mu.to(x.dtype), var.to(x.dtype)
    v_t = t**2 * var + (1 - t) ** 2
    dv_t = 2 * t * var - 2 * (1 - t)
    return mu + dv_t / (2 * v_t) * (x - t * mu)


def gaussian_score(x: torch.Tensor, t: torch.Tensor, mu: torch.Tensor, var: torch.Tensor) -> torch.Tensor:
    """Score of the marginal ``N(t mu, t^2 var + (1 - t)^2)`` at AM time ``t``."""
    t = t.to(x.dtype)[:, None]
    mu, var = mu.to(x.dtype), var.to(x.dtype)
    return -(x - t * mu) / (t**2 * var + (1 - t) ** 2)


class ToyVelocityNet(nn.Module):
    """``velocity(x, sigma) = -v_AM^pre(x, 1 - sigma) + MLP(x, features(sigma))`` (sigma convention).

    The MLP's linear layers are named ``net.0``, ``net.2``, ... (LoRA targets); its last layer is zero-initialised.
    """

    def __init__(
        self,
        dim: int,
        mu0: torch.Tensor,
        var0: torch.Tensor,
        hidden: int = 64,
        depth: int = 2,
        num_frequencies: int = 4,
        seed: int = 0,
    ):
        super().__init__()
        self.dim, self.num_frequencies = dim, num_frequencies
        self.register_buffer("mu0", mu0.clone())
        self.register_buffer("var0", var0.clone())
        gen = torch.Generator().manual_seed(seed)
        layers: list[nn.Module] = []
        width = dim + 1 + 2 * num_frequencies
        for _ in range(depth):
            layers += [nn.Linear(width, hidden), nn.SiLU()]
            width = hidden
        layers.append(nn.Linear(width, dim))
        self.net = nn.Sequential(*layers)
        with torch.no_grad():
            for m in self.net:
                if isinstance(m, nn.Linear):
                    bound = 1.0 / math.sqrt(m.in_features)
                    m.weight.uniform_(-bound, bound, generator=gen)
                    m.bias.uniform_(-bound, bound, generator=gen)
            self.net[-1].weight.zero_()
            self.net[-1].bias.zero_()

    def time_features(self, sigma: torch.Tensor) -> torch.Tensor:
        k = torch.arange(1, self.num_frequencies + 1, dtype=sigma.dtype, device=sigma.device)
        ang = math.pi * sigma[:, None] * k
        return torch.cat([sigma[:, None], torch.sin(ang), torch.cos(ang)], dim=1)

    def forward(self, hidden_states: torch.Tensor, timestep: torch.Tensor) -> torch.Tensor:
        x, sigma = hidden_states, timestep.to(hidden_states.dtype)
        pretrained = -gaussian_velocity_am(x, 1.0 - sigma, self.mu0, self.var0)
        return pretrained + self.net(torch.cat([x, self.time_features(sigma)], dim=1))


class ToyGaussianBackbone(FrozenReference, Backbone):
    """Backbone over :class:`ToyVelocityNet` (see the module docstring), built from its typed config
    (:class:`models.toy_gaussian_config.ToyGaussianModelConfig`); ``keep_reference`` keeps the frozen pretrained
    policy (LoRA: adapters disabled; full: a frozen copy)."""

    name = "toy_gaussian"

    def __init__(self, cfg: ToyGaussianModelConfig, keep_reference: bool = False):
        self.cfg = cfg
        self.name = cfg.name
        self.device = torch.device(str(cfg.device))
        self.dtype = torch_dtype(cfg.dtype)
        dim = self.dim = cfg.dim
        self.mu0, self.var0 = _per_dim(cfg.mu0, dim, "mu0"), _per_dim(cfg.var0, dim, "var0")
        self.transformer = ToyVelocityNet(
            dim, self.mu0, self.var0, cfg.hidden, cfg.depth, cfg.num_frequencies, cfg.seed
        )
        self.transformer.to(device=self.device, dtype=self.dtype)
        self.finetune = cfg.finetune
        if cfg.finetune == Finetune.lora:
            from peft import LoraConfig, inject_adapter_in_model

            targets = (
                list(cfg.lora_targets)
                if cfg.lora_targets
                else [f"net.{i}" for i, m in enumerate(self.transformer.net) if isinstance(m, nn.Linear)]
            )
            self.transformer.requires_grad_(False)
            inject_adapter_in_model(
                LoraConfig(
                    r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, init_lora_weights="gaussian", target_modules=targets
                ),
                self.transformer,
            )
            self.transformer.to(device=self.device, dtype=self.dtype)
        else:
            self.transformer.requires_grad_(True)
        self._keep_reference(keep_reference)

    # -- the analytic pretrained law (for tests and benchmarks) ------------------------------------------------
    def pretrained_law(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mu0, var0)`` per dimension (float64)."""
        return self.mu0.clone(), self.var0.clone()

    def pretrained_velocity_am(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return gaussian_velocity_am(x, t, self.mu0.to(x.device), self.var0.to(x.device))

    @torch.no_grad()
    def ode_samples(
        self,
        n: int,
        steps: int = 50,
        generator: torch.Generator | None = None,
        law: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """``n`` samples of the current (fine-tuned) model: Heun's 2nd-order ODE solver over ``steps`` uniform sigma
        steps from 1 to 0 (accurate enough that the statistics show the model, not the sampler).

        ``law=(mu, var)``: instead, the same solver on the analytic velocity of ``N(mu, diag var)`` from the same
        initial noise (the same ``generator`` state). Compared sample by sample with the model's, these common random
        numbers cancel the Monte-Carlo and solver error, so the difference shows the model's own error."""
        x = self.initial_noise(n, generator)
        if law is None:
            embeds = self.encode_prompts([""] * n)

            def velocity(x, s):
                return self.velocity(x, s, embeds)
        else:
            mu, var = (v.to(x.device, x.dtype) for v in law)

            def velocity(x, s):
                return -gaussian_velocity_am(x, 1.0 - s, mu, var)

        sigmas = torch.linspace(1.0, 0.0, steps + 1, dtype=torch.float64)
        for i in range(steps):
            s, s_next = sigmas[i].expand(n), sigmas[i + 1].expand(n)
            d = velocity(x, s)
            x_pred = x + (sigmas[i + 1] - sigmas[i]).item() * d
            d_next = velocity(x_pred, s_next)
            x = x + (sigmas[i + 1] - sigmas[i]).item() * 0.5 * (d + d_next)
        return x

    # -- Backbone interface -------------------------------------------------------------------------------------
    def encode_prompts(self, prompts: list[str]) -> PromptEmbeds:
        return PromptEmbeds({"null": torch.zeros(len(prompts), 1, device=self.device, dtype=self.dtype)})

    @property
    def latent_shape(self) -> tuple[int, ...]:
        return (self.dim,)

    def initial_noise(self, n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        return torch.randn((n, self.dim), generator=generator, dtype=torch.float64).to(self.device, self.dtype)

    def velocity(self, latents: torch.Tensor, sigma: torch.Tensor, embeds: PromptEmbeds) -> torch.Tensor:
        out = self._active(hidden_states=latents.to(self.dtype), timestep=sigma.to(self.device, self.dtype))
        return out.to(latents.dtype)

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        return latents.reshape(latents.shape[0], 3, 1, self.dim // 3)
