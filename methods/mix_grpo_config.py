"""Config of method=mix_grpo: MixGRPO (arXiv:2507.21802), the FLUX.1-dev recipe of its authors' code.

Source of every default: Tencent-Hunyuan/MixGRPO @e5cdd6a427778d8c8b2e7a48ce16972141adbe7c,
scripts/finetune/finetune_flux_grpo_MixGRPO.sh (the values it passes) and fastvideo/train_grpo_flux.py (argparse
defaults and the training loop); the window: fastvideo/utils/grpo_states.py; MixGRPO-Flash's rollout after the window
(``ode_solver``, ``post_window_compress``): scripts/finetune/finetune_flux_grpo_MixGRPO_Flash.sh and
fastvideo/utils/sampling_utils.py (``run_sample_step``, ``dpm_step``). docs/methods/mix_grpo.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Optional

from methods.base_config import RecipeLR
from methods.grpo_config import Advantage, Decode, GRPOConfig, NoiseKernel
from methods.mix_grpo_window import STRATEGIES, window_stop
from methods.schedule_config import Schedule
from rewardflow.errors import ConfigErrors


class OdeSolver(StrEnum):
    """The solver of the ODE steps after the window (docs/methods/mix_grpo.md#mixgrpo-flash)."""

    euler = "euler"  # MixGRPO: every ODE step is Euler's on the N-step grid (dpm_algorithm_type "null")
    dpm_solver_pp2 = "dpm_solver_pp2"  # MixGRPO-Flash: DPM-Solver++ (2M) after the window, on a compressed grid


class DpmSolverType(StrEnum):
    """The second-order DPM-Solver++ update (``--dpm_solver_type``; arXiv:2211.01095)."""

    midpoint = "midpoint"  # the Flash scripts' value
    heun = "heun"  # the reference's argparse default


@dataclass
class MixGRPOConfig(GRPOConfig):
    _target_: str = "methods.mix_grpo.MixGRPO"
    name: str = "mix_grpo"
    group_size: int = 12  # --num_generations 12
    prompts_per_step: int = 32  # --train_batch_size 1 on 4 nodes x 8 GPUs
    updates_per_rollout: int = 4  # 12 samples per rank, --gradient_accumulation_steps 3
    sampling_steps: int = 25  # sampling_steps=25
    shift: float = 3.0  # --shift 3 (sd3_time_shift of linspace(1, 0, N + 1))
    noise_kernel: NoiseKernel = NoiseKernel.flow  # --flow_grpo_sampling: flow_grpo_step, std = eta sqrt(s/(1-s))
    eta: float = 0.7  # eta=0.7
    quantize_timestep: bool = True  # the model sees int(1000 sigma) / 1000
    init_same_noise: bool = True  # --init_same_noise
    decode: Decode = Decode.final  # --drop_last_sample off: the final latent z is decoded
    clip_range: float = 1e-4  # --clip_range 1e-4
    adv_clip_max: float = 5.0  # --adv_clip_max 5.0
    advantage: Advantage = Advantage.group  # --use_group: (r - mean) / (std + 1e-8) per group, trimmed_ratio 0
    kl_beta: float = 0.0  # kl_coeff=0.0
    recipe_lr: RecipeLR = field(default_factory=lambda: RecipeLR(lora=3e-4, full=1e-5))  # --learning_rate 1e-5
    timestep_fraction: float = 1.0  # unused: the window decides the trained steps
    # -- the sliding window (fastvideo/utils/grpo_states.py GRPOTrainingStates, training_strategy="part") --------
    window_size: int = 4  # group_size=4: SDE (= trained) steps per iteration
    window_shift_every: int = 25  # iters_per_group=25 (MixGRPO-Flash's script: 20)
    window_stride: int = 1  # --prog_overlap --prog_overlap_step 1 (prog_overlap off = stride window_size)
    window_strategy: str = "progressive"  # sample_strategy="progressive" (decay, exp_decay: the reference's others)
    window_stop: Optional[int] = None  # max_timesteps; None = sampling_steps - 2 (train_grpo_flux.py)
    window_roll_back: bool = True  # --roll_back: back to step 0 past window_stop (off: stays at the end)
    window_decay_max: int = 10  # --max_iters_per_group 10 (strategy decay only)
    window_decay_min: int = 1  # --min_iters_per_group 1 (strategy decay only)
    window_exp_threshold: int = 13  # exp_decay_thre_timestep (strategy exp_decay only)
    window_exp_k: float = 0.1  # exp_decay_k (strategy exp_decay only)
    # -- MixGRPO-Flash (method=mix_grpo_flash): the ODE after the window (sampling_utils.py run_sample_step) --------
    ode_solver: OdeSolver = OdeSolver.euler  # --dpm_algorithm_type null (Flash: dpmsolver++, order 2, "post")
    dpm_solver_type: DpmSolverType = DpmSolverType.midpoint  # --dpm_solver_type midpoint (_Flash.sh)
    # --dpm_post_compress_ratio 0.4 (argparse default and _Flash.sh; _Flash*.sh: 0.2): after the window's last step e,
    # its N - e - 1 steps become max(int(ratio (N - e)), 2) - 1 (dpm_solver_pp2 only; methods/mix_grpo_window.py)
    post_window_compress: float = 0.4

    @classmethod
    def check(cls, cfg: Any, errors: ConfigErrors) -> None:
        super().check(cfg, errors)
        m = cfg.method
        n, size, stop = int(m.sampling_steps), int(m.window_size), window_stop(m)
        errors.require(
            m.window_strategy in STRATEGIES,
            "method.window_strategy",
            f"must be one of {', '.join(STRATEGIES)} (got {m.window_strategy!r})",
        )
        errors.require(size >= 1, "method.window_size", f"must be >= 1 (got {size})")
        errors.require(
            1 <= stop <= n - 1,
            "method.window_stop",
            f"= {stop} must be in [1, sampling_steps - 1 = {n - 1}] (the last step is never trained); "
            "Fix: leave it null (sampling_steps - 2, the reference's)",
        )
        errors.require(
            size <= stop,
            "method.window_size",
            f"= {size} does not fit below window_stop = {stop} (sampling_steps={n}). "
            f"Fix: method.window_size={max(1, stop)} or more sampling steps",
        )
        errors.require(
            m.window_shift_every >= 1, "method.window_shift_every", f"must be >= 1 (got {m.window_shift_every})"
        )
        errors.require(
            m.window_stride >= 0,
            "method.window_stride",
            f"must be >= 0 (got {m.window_stride}); 0 freezes the window at step 0 (_Flash*.sh's prog_overlap_step 0)",
        )
        errors.require(
            m.window_strategy != "decay" or 1 <= m.window_decay_min <= m.window_decay_max,
            "method.window_decay_min",
            f"needs 1 <= window_decay_min <= window_decay_max (got {m.window_decay_min}, {m.window_decay_max})",
        )

        if m.ode_solver == OdeSolver.dpm_solver_pp2:
            errors.require(
                0 < float(m.post_window_compress) <= 1,
                "method.post_window_compress",
                f"must be in (0, 1] (got {m.post_window_compress}): the share of the post-window steps kept",
            )
            errors.require(
                m.schedule == Schedule.linear_shift,
                "method.schedule",
                f"= {m.schedule} cannot be compressed after the window: MixGRPO-Flash's compressed grid is the shifted "
                "linear one (docs/methods/mix_grpo.md#mixgrpo-flash). Fix: method.schedule=linear_shift",
            )


SCHEMAS = {"method": {"mix_grpo": MixGRPOConfig}}
