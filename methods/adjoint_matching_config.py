"""Config of method=adjoint_matching (Domingo-Enrich et al., ICLR 2025; docs/methods/eam.md#adjoint-matching): values
from AM App. G as quoted secondhand. The paper's optimizer (Adam lr 2e-5, betas 0.95/0.999, wd 1e-2) is set by
presets."""

from __future__ import annotations

from dataclasses import dataclass

from methods.soc_base_config import SOCConfig


@dataclass
class AdjointMatchingConfig(SOCConfig):
    _target_: str = "methods.adjoint_matching.AdjointMatching"
    name: str = "adjoint_matching"
    loss_last_steps: int = 10  # the last steps of the K-step grid enter the loss ...
    loss_random_steps: int = 10  # ... plus this many random earlier steps per sample (AM App. G.2)
    denoise_last_step: bool = True  # reward at X_{K-1} + h v_pre(X_{K-1}) instead of the noisy X_K (AM App. G.1)
    loss_clip: float = 1.6  # AM App. G.3: LCT = 1.6 lambda^2
    update_batch: int = 20  # one sample's 20 loss steps per call (and 20 samples per rollout / VJP call)


SCHEMAS = {"method": {"adjoint_matching": AdjointMatchingConfig}}
