"""Config of method=grpo_guard: GRPO-Guard (arXiv:2510.22319) on Flow-GRPO's sampler and updates. Every default is
Flow-GRPO's SD3.5-M value (methods/flow_grpo_config.py) except the clip range. The loss is pinned to
``GRPOGuardLoss.compute_loss`` of verl-project/verl-omni @a1139bafffb5b9711f0a6b6edff8ecaa60bfff30
(``verl_omni/trainer/diffusion/diffusion_algos.py``, Apache-2.0; docs/methods/grpo_guard.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from methods.flow_grpo_config import FlowGRPOConfig
from methods.grpo_config import NoiseKernel
from rewardflow.errors import ConfigErrors


@dataclass
class GRPOGuardConfig(FlowGRPOConfig):
    _target_: str = "methods.grpo_guard.GRPOGuard"
    name: str = "grpo_guard"
    # PPO epsilon on the normalised ratio exp(s (log rho + b)), s = g sqrt(-Delta) < 1 shrinks its spread, so the
    # range is far below Flow-GRPO's 1e-4: verl-omni's GRPO-Guard example
    # (examples/grpoguard_trainer/qwen_image/run_qwen_image_ocr_lora.sh @a1139ba: diffusion_loss.clip_ratio=2e-6)
    clip_range: float = 2e-6
    # RatioNorm (paper Eq. 8): shift log rho by b = mean_D ||mu_theta - mu_old||^2 / (2 s^2) and scale it by s; false:
    # Flow-GRPO's plain ratio (the paper's ablation of the two parts, section 4.3)
    ratio_norm: bool = True
    # gradient reweighting across timesteps (paper Eq. 12): each step's loss divided by -Delta = sqrt(-dt)^2, the
    # reference code's `pg_loss / sqrt_dt_mean**2`; false: every step weighs the same, as in Flow-GRPO
    grad_reweight: bool = True

    @classmethod
    def check(cls, cfg: Any, errors: ConfigErrors) -> None:
        super().check(cfg, errors)
        m = cfg.method
        errors.require(
            m.noise_kernel != NoiseKernel.cps,
            "method.noise_kernel",
            "GRPO-Guard's RatioNorm assumes the Gaussian log-prob of the SDE step (mean over the latent of "
            "-(x - mu)^2 / (2 s^2)); noise_kernel=cps scores steps without 1 / (2 s^2) (got cps). "
            "Fix: method.noise_kernel=flow (the reference's sde_type=sde) or dance",
        )


SCHEMAS = {"method": {"grpo_guard": GRPOGuardConfig}}
