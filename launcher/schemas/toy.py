"""Schemas of the Gaussian toy problem with a known answer (model=toy_gaussian, reward=gaussian_tilt)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from launcher.schemas.builtin_rewards import RewardConfig


@dataclass
class ToyGaussianModelConfig:
    _target_: str = "models.toy_gaussian.ToyGaussianBackbone"
    name: str = "toy_gaussian"
    dim: int = 3                      # latent dimension (multiple of 3)
    mu0: list[float] = field(default_factory=lambda: [0.5])    # pretrained law N(mu0, var0): 1 or dim values
    var0: list[float] = field(default_factory=lambda: [0.6])
    hidden: int = 64                  # residual MLP width
    depth: int = 2                    # hidden layers
    num_frequencies: int = 4          # Fourier features of the time
    finetune: str = "full"            # full | lora
    lora_rank: int = 8
    lora_alpha: float = 8.0
    lora_targets: Optional[list[str]] = None   # default: every linear layer of the MLP
    seed: int = 0
    device: str = "cpu"
    dtype: str = "float64"


@dataclass
class GaussianTiltRewardConfig(RewardConfig):
    _target_: str = "rewards.gaussian_tilt.GaussianTiltReward"
    name: str = "gaussian_tilt"
    kind: str = "quadratic"           # quadratic: -gamma/2 ||x - target||^2 | linear: direction . x
    gamma: float = 1.0
    target: list[float] = field(default_factory=lambda: [2.0])       # per image channel (1 or 3 values)
    direction: list[float] = field(default_factory=lambda: [1.0])


SCHEMAS = {"model": {"toy_gaussian": ToyGaussianModelConfig}, "reward": {"gaussian_tilt": GaussianTiltRewardConfig}}
