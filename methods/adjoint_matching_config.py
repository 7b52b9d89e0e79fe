"""Config of method=adjoint_matching (Domingo-Enrich et al., ICLR 2025; docs/methods/eam.md#adjoint-matching): values
from AM App. G as quoted secondhand. The paper's optimizer (Adam lr 2e-5, betas 0.95/0.999, wd 1e-2) is set by
presets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from methods.soc_base_config import SOCConfig
from rewardflow.errors import ConfigErrors


@dataclass
class AdjointMatchingConfig(SOCConfig):
    _target_: str = "methods.adjoint_matching.AdjointMatching"
    name: str = "adjoint_matching"
    loss_last_steps: int = 10  # the last steps of the K-step grid enter the loss ...
    loss_random_steps: int = 10  # ... plus this many random earlier steps per sample (AM App. G.2)
    denoise_last_step: bool = True  # reward at X_{K-1} + h v_pre(X_{K-1}) instead of the noisy X_K (AM App. G.1)
    loss_clip: float = 1.6  # AM App. G.3: LCT = 1.6 lambda^2
    update_batch: int = 20  # one sample's 20 loss steps per call (and 20 samples per rollout / VJP call)

    @classmethod
    def check(cls, cfg: Any, errors: ConfigErrors) -> None:
        super().check(cfg, errors)
        m = cfg.method
        if m.sigma_offset >= 0:  # negative: SOCMethod's error already
            errors.require(
                m.sigma_offset > 0,
                "method.sigma_offset",
                f"must be > 0 for the rollout (got "
                f"{m.sigma_offset}): the memoryless sigma(t) is infinite at t = 0 without it; AM uses 1/40",
            )
        errors.require(
            m.loss_last_steps >= 0 and m.loss_random_steps >= 0,
            "method.loss_last_steps",
            f"loss_last_steps and loss_random_steps must be >= 0 (got {m.loss_last_steps}, {m.loss_random_steps})",
        )
        errors.require(
            m.loss_last_steps + m.loss_random_steps >= 1,
            "method.loss_last_steps",
            "loss_last_steps + loss_random_steps must be >= 1 (AM: 10 + 10)",
        )


SCHEMAS = {"method": {"adjoint_matching": AdjointMatchingConfig}}
