"""Rewards with an analytic tilted target for Gaussian data, for the toy problem (docs/methods/eam.md#the-gaussian-toy).

On latents decoded as "images" by :class:`models.toy_gaussian.ToyGaussianBackbone` (pixel values = coordinates):

* ``quadratic``: ``r(x) = -gamma/2 ||x - y||^2``. For data ``N(mu0, var0)`` (per dimension) the tilt
  ``p* ~ p_pre exp(lambda r)`` is ``N(mu*, var*)`` with ``1/var* = 1/var0 + lambda gamma`` and
  ``mu* = var* (mu0/var0 + lambda gamma y)``.
* ``linear``: ``r(x) = a . x``; the tilt shifts the mean to ``mu0 + lambda var0 a`` and keeps the variance (a sign
  test: the mean must move along ``+a``).

``target`` (y) and ``direction`` (a) hold one value per image channel (1 or 3 values), broadcast over pixels, so the
reward is defined (though meaningless) on real images too. Differentiable.
"""

from __future__ import annotations

import torch

from rewards.base import Reward
from rewards.gaussian_tilt_config import GaussianTiltRewardConfig, TiltKind


class GaussianTiltReward(Reward[GaussianTiltRewardConfig]):
    differentiable = True

    def __init__(self, cfg: GaussianTiltRewardConfig):
        super().__init__(cfg)
        self.kind, self.gamma = cfg.kind, float(cfg.gamma)
        self.register_buffer("_target", torch.tensor(list(cfg.target), dtype=torch.float64), persistent=False)
        self.register_buffer("_direction", torch.tensor(list(cfg.direction), dtype=torch.float64), persistent=False)

    def _per_channel(self, v: torch.Tensor, images: torch.Tensor) -> torch.Tensor:
        return v.to(images.device, images.dtype).expand(3)[None, :, None, None]

    def score(self, images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        if self.kind == TiltKind.quadratic:
            return -0.5 * self.gamma * ((images - self._per_channel(self._target, images)) ** 2).flatten(1).sum(1)
        return (images * self._per_channel(self._direction, images)).flatten(1).sum(1)

    def tilted_gaussian(
        self, mu0: torch.Tensor, var0: torch.Tensor, reward_scale: float, channel_of_dim: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mu*, var*)`` per dimension of the tilt of ``N(mu0, diag var0)`` by ``exp(reward_scale * r)``.

        ``channel_of_dim`` maps each latent dimension to its image channel (default: the toy's layout, dimension
        ``i`` of ``d = 3 k`` lies in channel ``i // k``)."""
        mu0, var0 = mu0.double(), var0.double()
        d = mu0.numel()
        ch = channel_of_dim if channel_of_dim is not None else torch.arange(d) // max(1, d // 3)
        if self.kind == TiltKind.quadratic:
            y = self._target.double().expand(3)[ch]
            prec = 1.0 / var0 + reward_scale * self.gamma
            var = 1.0 / prec
            return var * (mu0 / var0 + reward_scale * self.gamma * y), var
        a = self._direction.double().expand(3)[ch]
        return mu0 + reward_scale * var0 * a, var0.clone()
