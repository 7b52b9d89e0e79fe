"""Config of the shared GRPO machinery (:mod:`methods.grpo`; Flow-GRPO arXiv:2505.05470, DanceGRPO
arXiv:2505.07818). The defaults are DanceGRPO's official Flux values (XueZeyue/DanceGRPO @15cc71d); each variant's
config overrides what differs."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from methods.base_config import MethodConfig, RecipeLR
from methods.schedule_config import Schedule
from rewardflow.errors import ConfigErrors


class NoiseKernel(StrEnum):
    """The diffusion coefficient ``g`` of the SDE step (:class:`methods.sde.FlowSDEScheduler`)."""

    dance = "dance"  # constant g = eta (DanceGRPO)
    flow = "flow"  # g = eta sqrt(sigma / (1 - sigma)) (Flow-GRPO)
    linear = "linear"  # g = eta sigma_1 sigma (the Wan pipelines of Flow-GRPO and Flash-GRPO)
    cps = "cps"  # Flow-GRPO's coefficient-preserving step, std = sigma_next sin(eta pi / 2) (docs/cps.md)


class Decode(StrEnum):
    final = "final"  # decode the final latent x_N (Flow-GRPO)
    pred_x0 = "pred_x0"  # decode x0 predicted at the last step (DanceGRPO)


class Advantage(StrEnum):
    group = "group"  # (r - mean) / (unbiased std + 1e-8) per group of G (DanceGRPO)
    prompt = "prompt"  # per prompt string over the gathered batch, population std + 1e-4 (PerPromptStatTracker)


@dataclass
class GRPOConfig(MethodConfig):
    group_size: int = 12  # num_generations
    prompts_per_step: int = 2  # train_batch_size per GPU x GPUs (here: global)
    sampling_steps: int = 16
    updates_per_rollout: int = 2  # 24 samples per rank with gradient_accumulation_steps 12 -> 2 optimizer steps
    shift: float = 3.0  # SD3 time shift S (linear_shift grid; the static shift of a scheduler grid)
    schedule: Schedule = Schedule.linear_shift  # sigma_0 = 1, sigma_N = 0
    noise_kernel: NoiseKernel = NoiseKernel.dance
    eta: float = 0.3  # eta (dance, linear) or the noise level a (flow, cps)
    quantize_timestep: bool = True  # the model sees floor(1000 sigma) / 1000 (the SDE uses exact sigma)
    init_same_noise: bool = True  # one initial latent per prompt group
    decode: Decode = Decode.pred_x0
    clip_range: float = 1e-4  # PPO epsilon
    # warn once when more than this share of the first update's rows is clipped before any optimizer step
    # (rollout-vs-update numerical drift, docs/metrics.md#first-update-ratios); 0: never
    pre_update_clip_warn: float = 0.05
    # every transformer call of the rollout and of the update holds update_batch rows (the last ones padded), so in
    # bf16 a row's velocity is computed by the same GEMM shapes when sampled and when trained
    # (docs/metrics.md#first-update-ratios); costs at most one padded call per update and per sampling step
    match_update_shapes: bool = False
    adv_clip_max: float = 5.0  # advantages clamped to +-adv_clip_max (every official script: 5)
    advantage: Advantage = Advantage.group
    global_std: bool = False  # advantage=prompt: std over all rewards of the step
    kl_beta: float = 0.0  # beta of the KL to the frozen reference policy (DanceGRPO has none)
    kl_exact: bool = False  # divide the KL by |Delta| as the exact Gaussian KL does
    # DanceGRPO's FLUX scripts: full fine-tuning 1e-5, LoRA (r128) 3e-4; Flow-GRPO's SD3.5-M LoRA recipe: 3e-4 too
    # (docs/methods/grpo_baselines.md#upstream-recipes)
    recipe_lr: RecipeLR = field(default_factory=lambda: RecipeLR(lora=3e-4, full=1e-5))
    timestep_fraction: float = 0.6  # DanceGRPO: each sample trains a random floor(0.6 (N-1)) of its N-1 trainable
    # steps (the rule is each variant's)

    @classmethod
    def check(cls, cfg: Any, errors: ConfigErrors) -> None:
        super().check(cfg, errors)
        m = cfg.method
        if m.group_size >= 1:
            errors.require(
                m.group_size >= 2,
                "method.group_size",
                f"must be >= 2 for group-relative advantages (got {m.group_size})",
            )
        errors.require(
            m.clip_range > 0, "method.clip_range", f"must be > 0 (got {m.clip_range}); DanceGRPO and Flow-GRPO use 1e-4"
        )
        errors.require(
            m.adv_clip_max > 0, "method.adv_clip_max", f"must be > 0 (got {m.adv_clip_max}); the baselines use 5"
        )
        errors.require(
            m.eta > 0, "method.eta", f"must be > 0 (got {m.eta}): a zero noise level makes every step deterministic"
        )
        errors.require(m.shift > 0, "method.shift", f"must be > 0 (got {m.shift})")
        errors.require(
            m.pre_update_clip_warn >= 0, "method.pre_update_clip_warn", f"must be >= 0 (got {m.pre_update_clip_warn})"
        )
        errors.require(m.kl_beta >= 0, "method.kl_beta", f"must be >= 0 (got {m.kl_beta})")
        errors.require(
            0 < m.timestep_fraction <= 1, "method.timestep_fraction", f"must be in (0, 1] (got {m.timestep_fraction})"
        )
        errors.require(
            m.noise_kernel != NoiseKernel.cps or m.eta <= 1,
            "method.eta",
            f"with noise_kernel=cps the noise level a sets the step's std sigma_next sin(a pi/2) and must "
            f"be in (0, 1] (got {m.eta}); upstream's CPS configs use 0.8. Fix: method.eta=0.8",
        )
