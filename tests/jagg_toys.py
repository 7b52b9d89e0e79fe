"""Float64 toy backbones and hand-built rollouts for JAGG's math tests (docs/methods/jagg.md#tested-invariants).

The tests run the real method code (``JAGG.backward`` and the baseline's exact ``GRPO.backward``) on velocity models
small enough to reason about: an affine model ``v = A z + u t + c`` (Theorem 1) and a tanh MLP (nonlinear).
"""

from __future__ import annotations

import torch
from omegaconf import OmegaConf
from torch import nn

from methods.base import Rollout
from methods.jagg import JAGG
from methods.jagg_config import JAGGConfig
from methods.sde import FlowSDEScheduler
from models.backbone import Backbone, PromptEmbeds

F64 = torch.float64


class Affine(nn.Module):
    """``v = A z + u t + c``: its parameter-Jacobian is affine in (z, t)."""

    def __init__(self, dim: int, seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.A = nn.Parameter(0.3 * torch.randn(dim, dim, generator=g, dtype=F64))
        self.u = nn.Parameter(torch.randn(dim, generator=g, dtype=F64))
        self.c = nn.Parameter(torch.randn(dim, generator=g, dtype=F64))

    def forward(self, z, t):
        return z @ self.A.T + t.to(F64)[:, None] * self.u + self.c


class MLP(nn.Module):
    """A 2-layer tanh MLP of (z, t): a nonlinear velocity model."""

    def __init__(self, dim: int, hidden: int = 32, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.net = nn.Sequential(nn.Linear(dim + 1, hidden), nn.Tanh(), nn.Linear(hidden, dim)).to(F64)

    def forward(self, z, t):
        return self.net(torch.cat([z, t.to(F64)[:, None]], 1))


class ToyBackbone(Backbone):
    """A :class:`Backbone` around a velocity module of (z, t) on flat float64 latents."""

    name = "toy"

    def __init__(self, net: nn.Module, dim: int):
        self.transformer, self.device, self._dim = net, torch.device("cpu"), dim

    def encode_prompts(self, prompts):
        return PromptEmbeds({"row": torch.arange(len(prompts), dtype=F64)[:, None]})

    @property
    def latent_shape(self):
        return (self._dim,)

    def velocity(self, latents, sigma, embeds):
        return self.transformer(latents, sigma)

    def decode(self, latents):
        return latents


def fp32_exact(sigmas: torch.Tensor) -> torch.Tensor:
    """The schedule rounded to float32-representable values: the GRPO core feeds the model its time in fp32, so
    Theorem 1's ``t_j = (1 - alpha_j) t_0 + alpha_j t_{W-1}`` holds for the model's input only on such values."""
    return sigmas.float().double()


def make_jagg(net: nn.Module, dim: int, **overrides) -> JAGG:
    """JAGG over DanceGRPO's sampler on a toy backbone, schedule N = 21, shift 3, fp32-exact sigmas."""
    values = dict(
        base="dance_grpo",
        sampling_steps=21,
        shift=3.0,
        eta=0.3,
        window=4,
        jagg_frac=1.0,
        quantize_timestep=False,
        clip_range=1e-4,
        group_size=2,
        prompts_per_step=1,
    )
    values.update(overrides)
    method = JAGG(OmegaConf.to_object(OmegaConf.structured(JAGGConfig(**values))), ToyBackbone(net, dim))
    method.sigmas = fp32_exact(method.sigmas)
    method.sde = FlowSDEScheduler(method.sigmas, method.cfg.noise_kernel, method.cfg.eta)
    return method


def sde_rollout(
    method: JAGG, b: int, seed: int = 0, collinear: bool = False, old_policy: nn.Module | None = None
) -> Rollout:
    """A float64 rollout of ``b`` samples over all N steps with the method's SDE and (``old_policy`` or) its model.

    With ``collinear``, the states inside each group of trained steps are forced onto the t-weighted line between the
    group's endpoint states (Theorem 1's hypothesis) and every log-prob is recomputed from the forced states.
    Advantages are random and of both signs.
    """
    g = torch.Generator().manual_seed(seed)
    sde, net = method.sde, old_policy or method.backbone.transformer
    n, d = sde.num_steps, method.backbone.latent_shape[0]
    x = torch.empty(b, n + 1, d, dtype=F64)
    x[:, 0] = torch.randn(b, d, generator=g, dtype=F64)
    for i in range(n):
        index = torch.full((b,), i)
        with torch.no_grad():
            v = net(x[:, i], sde.sigma(index).float())
        x[:, i + 1] = sde.step(x[:, i], v, index, noise=torch.randn(b, d, generator=g, dtype=F64)).prev_sample
    trainable = method.select_train_steps(torch.ones(b, n, dtype=torch.bool), g)
    groups = method.layout.assign(trainable)
    if collinear:
        w = method.layout.window
        for k in range(method.layout.num_groups):
            first = int(trainable[0, k * w])
            steps = torch.arange(first, first + w)
            alpha = (sde.sigmas[first] - sde.sigmas[steps]) / (sde.sigmas[first] - sde.sigmas[first + w - 1])
            x[:, steps] = (1 - alpha)[None, :, None] * x[:, first, None] + alpha[None, :, None] * x[
                :, first + w - 1, None
            ]
    log_probs = torch.empty(b, n, dtype=F64)
    for i in range(n):
        index = torch.full((b,), i)
        with torch.no_grad():
            v = net(x[:, i], sde.sigma(index).float())
        log_probs[:, i] = sde.log_prob(x[:, i + 1], x[:, i], v, index)[0]
    prompts = [f"p{k}" for k in range(b)]
    return Rollout(
        prompts=prompts,
        group_keys=[0] * b,
        embeds=method.backbone.encode_prompts(prompts),
        images=x[:, -1],
        latents=x,
        log_probs=log_probs,
        train_steps=groups.steps,
        advantages=torch.randn(b, generator=g, dtype=F64),
        extras={"jagg_groups": groups},
    )


def grads(module: nn.Module) -> dict[str, torch.Tensor]:
    return {k: p.grad.detach().clone() for k, p in module.named_parameters() if p.grad is not None}


def gradient(
    method: JAGG, rollout: Rollout, exact: bool, samples: torch.Tensor | None = None, update_size: int | None = None
) -> dict[str, torch.Tensor]:
    """``.grad`` after one backward of ``samples`` (default: all) by JAGG, or by the baseline's exact backward."""
    net = method.backbone.transformer
    net.zero_grad(set_to_none=True)
    samples = torch.arange(len(rollout)) if samples is None else samples
    update_size = update_size or len(samples)
    if exact:
        super(JAGG, method).backward(rollout, samples, update_size)
    else:
        method.backward(rollout, samples, update_size)
    return grads(net)


def flat(g: dict[str, torch.Tensor], keys=None) -> torch.Tensor:
    return torch.cat([g[k].flatten() for k in (keys or sorted(g))])


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def cos(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(a @ b / (a.norm() * b.norm()))
