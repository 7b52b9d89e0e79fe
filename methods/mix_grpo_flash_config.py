"""Config of method=mix_grpo_flash: MixGRPO-Flash (arXiv:2507.21802), MixGRPO whose ODE after the window is
DPM-Solver++ (2M, midpoint) on a grid compressed to 0.4 of its steps (docs/methods/mix_grpo.md#mixgrpo-flash).

Source: Tencent-Hunyuan/MixGRPO @e5cdd6a427778d8c8b2e7a48ce16972141adbe7c,
scripts/finetune/finetune_flux_grpo_MixGRPO_Flash.sh; every other value is MixGRPO's (methods/mix_grpo_config.py),
which that script shares.
"""

from __future__ import annotations

from dataclasses import dataclass

from methods.mix_grpo_config import MixGRPOConfig, OdeSolver


@dataclass
class MixGRPOFlashConfig(MixGRPOConfig):
    name: str = "mix_grpo_flash"
    # dpm_algorithm_type="dpmsolver++", dpm_apply_strategy="post", dpm_solver_order=2 (the post-window ODE);
    # dpm_solver_type="midpoint" and dpm_post_compress_ratio=0.4 are MixGRPOConfig's defaults already
    ode_solver: OdeSolver = OdeSolver.dpm_solver_pp2
    window_shift_every: int = 20  # iters_per_group=20


SCHEMAS = {"method": {"mix_grpo_flash": MixGRPOFlashConfig}}
