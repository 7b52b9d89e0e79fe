"""Config of model=toy_gaussian: the Gaussian toy with a known answer (docs/methods/eam.md#the-gaussian-toy). The
pretrained model generates N(mu0, var0) with an analytic velocity; the fine-tuned velocity is that plus a small
zero-initialised MLP. CPU, float64. See experiment=toy_eam / toy_am."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from models.backbone_config import Finetune, ModelConfig
from rewardflow.devices import Device
from rewardflow.dtypes import Dtype
from rewardflow.errors import ConfigErrors

TOY_DTYPES = (Dtype.float64, Dtype.fp64, Dtype.float32, Dtype.fp32)


@dataclass
class ToyGaussianModelConfig(ModelConfig):
    _target_: str = "models.toy_gaussian.ToyGaussianBackbone"
    name: str = "toy_gaussian"
    dim: int = 3  # latent dimension (a multiple of 3: decoded as a 3-channel image)
    mu0: list[float] = field(default_factory=lambda: [0.5, -0.5, 0.0])  # pretrained law N(mu0, var0): 1 or dim
    var0: list[float] = field(default_factory=lambda: [0.6, 0.6, 1.0])  # values each
    hidden: int = 64  # residual MLP width
    depth: int = 2  # hidden layers
    num_frequencies: int = 4  # Fourier features of the time
    finetune: Finetune = Finetune.full
    lora_rank: int = 8  # >= 1
    lora_alpha: float = 8.0  # finite, > 0
    lora_targets: Optional[list[str]] = None  # default: every linear layer of the MLP
    seed: int = 0
    device: Device = Device.cpu
    dtype: Dtype = Dtype.float64  # float64 or float32

    @classmethod
    def check(cls, cfg: Any, errors: ConfigErrors) -> None:
        super().check(cfg, errors)
        m = cfg.model
        errors.require(
            m.dim >= 3 and m.dim % 3 == 0,
            "model.dim",
            f"must be a positive multiple of 3 (decoded as a 3-channel image), got {m.dim}",
        )
        for key in ("mu0", "var0"):
            n = len(getattr(m, key))
            errors.require(n in (1, m.dim), f"model.{key}", f"needs 1 or dim={m.dim} values (got {n})")
        errors.require(all(v > 0 for v in m.var0), "model.var0", f"must be > 0 (got {list(m.var0)})")
        errors.require(m.dtype in TOY_DTYPES, "model.dtype", f"must be one of {', '.join(TOY_DTYPES)} (got {m.dtype})")


SCHEMAS = {"model": {"toy_gaussian": ToyGaussianModelConfig}}
