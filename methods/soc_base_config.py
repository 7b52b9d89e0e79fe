"""Config shared by the stochastic-optimal-control methods (method=adjoint_matching|eam; docs/methods/eam.md).

Keys marked [R] are reconstructed or recommended where the papers could not be read; they are flags, and
docs/methods/eam.md#what-is-reconstructed says which.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from methods.base_config import MethodConfig, RecipeLR
from rewardflow.errors import ConfigErrors


class LossReduction(StrEnum):
    sum = "sum"  # the squared residual summed over latent elements
    mean = "mean"  # ... averaged over them


@dataclass
class SOCConfig(MethodConfig):
    """Knobs shared by Adjoint Matching and EAM (no group statistics: B = prompts_per_step x group_size)."""

    group_size: int = 1
    # full: AM's Adam 2e-5 (AM App. G, docs/methods/eam.md#adjoint-matching); LoRA: experiment=eam_sd35m's AdamW
    # 1e-4, a reconstruction ([R], docs/methods/eam.md#what-is-reconstructed)
    recipe_lr: RecipeLR = field(default_factory=lambda: RecipeLR(lora=1e-4, full=2e-5))
    prompts_per_step: int = 40  # a batch of 40 trajectories
    sampling_steps: int = 40  # K: AM's SDE rollout steps on t_k = k / K; EAM's grid for time_sampling=am_grid
    reward_scale: float = 1.0e5  # lambda: the target is p_pre exp(lambda r). Sized for the CPU demo's colour
    # reward in [0, 1]; sweep it per reward (AM's ImageReward example: 12500; for
    # PickScore start from 1e2..1e4)
    sigma_offset: float = 0.025  # h in sigma(t) = sqrt(2 (1 - t + h) / (t + h)), kappa = 1 / (t + h) (AM: 1/40)
    loss_clip: float = 0.0  # per-sample loss clipped at loss_clip x lambda^2 (AM's LCT: 1.6); 0 = off
    loss_reduction: LossReduction = LossReduction.sum

    @classmethod
    def check(cls, cfg: Any, errors: ConfigErrors) -> None:
        super().check(cfg, errors)
        m = cfg.method
        errors.require(
            m.reward_scale > 0,
            "method.reward_scale",
            f"must be > 0 (got {m.reward_scale}); it is the "
            f"multiplier lambda of the target p_pre exp(lambda r): sweep it per reward (e.g. 1e2..1e4 for "
            f"PickScore)",
        )
        errors.require(m.sigma_offset >= 0, "method.sigma_offset", f"must be >= 0 (got {m.sigma_offset}); AM uses 1/40")
        errors.require(
            m.loss_clip >= 0, "method.loss_clip", f"must be >= 0 (got {m.loss_clip}); 0 disables the per-sample clip"
        )
