"""Config of method=diffusion_nft (Zheng et al., arXiv:2509.16117; code NVlabs/DiffusionNFT @24af555;
docs/methods/diffusion_nft.md): the authors' SD3.5-M values (config/nft.py ``_get_config``, config/base.py) as the
defaults; experiment=nft_sd35m is their multi-reward recipe."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from methods.base_config import MethodConfig, RecipeLR
from methods.grpo_config import Advantage
from methods.schedule_config import Schedule
from rewardflow.errors import ConfigErrors


class Sampler(StrEnum):
    """The diffusers ODE solver of the rollout (methods/ode_solvers.py)."""

    euler = "euler"  # FlowMatchEulerDiscreteScheduler
    dpmpp_2m = "dpmpp_2m"  # DPMSolverMultistepScheduler, dpmsolver++ order 2: their solver "dpm2"
    unipc = "unipc"  # UniPCMultistepScheduler, bh2 order 2


class AdvMode(StrEnum):
    """How advantages are reshaped before the optimality weight r (their train.adv_mode; methods/nft_loss.py)."""

    all = "all"
    positive_only = "positive_only"
    negative_only = "negative_only"
    one_only = "one_only"
    binary = "binary"


@dataclass
class DiffusionNFTConfig(MethodConfig):
    _target_: str = "methods.diffusion_nft.DiffusionNFT"
    name: str = "diffusion_nft"
    # LoRA: the authors' 3e-4 (nft.py _get_config); they publish no full fine-tuning: DanceGRPO's full rate (ours)
    recipe_lr: RecipeLR = field(default_factory=lambda: RecipeLR(lora=3e-4, full=1e-5))
    group_size: int = 24  # images per prompt (nft.py:28 sample.num_image_per_prompt)
    prompts_per_step: int = 48  # prompt groups per rollout, global across ranks (nft.py:29 num_groups)
    sampling_steps: int = 10  # N rollout solver steps (nft.py:20; 25 in sd3_multi_reward, nft.py:136)
    updates_per_rollout: int = 1  # optimizer steps per rollout (nft.py:11 gradient_step_per_epoch; 2 in sd3_ocr)
    update_batch: int = 9  # rows per call: nft.py:26 per-GPU batch 9 at one time (the gradient does not
    # depend on it)
    shuffle_samples: bool = True  # their per-epoch shuffle of the samples before the updates
    sampler: Sampler = Sampler.dpmpp_2m  # nft.py:66 solver "dpm2"
    schedule: Schedule = Schedule.scheduler  # the rollout's and the trained times' sigma grid: the family's
    # scheduler sigmas (their SD3 pipeline's FlowMatchEulerDiscreteScheduler)
    shift: float = 3.0  # time shift of the grid (static-shift families)
    quantize_rollout_time: bool = False  # feed the model floor(1000 sigma)/1000 while sampling (their SD3 pipeline
    # casts 1000 sigma to long; experiment=nft_sd35m: true)
    beta: float = 1.0  # positive/negative mixing coefficient (nft.py:61 config.beta; 0.1 in
    # sd3_multi_reward and sd3_ocr)
    kl_beta: float = 1.0e-4  # weight of mean ||v - v_ref||^2 to the frozen pretrained model (nft.py:24)
    adv_clip_max: float = 5.0  # advantages clamped to +-adv_clip_max, then r = 1/2 + A / (2 adv_clip_max)
    # (base.py:84)
    advantage: Advantage = Advantage.prompt  # group means by prompt string (PerPromptStatTracker) or group id
    global_std: bool = True  # prompt mode: divide by the std of all the step's rewards (base.py:57)
    adv_mode: AdvMode = AdvMode.all  # nft.py:62
    timestep_fraction: float = 0.99  # each sample trains floor(fraction x N) random grid times (base.py:87: 9 of 10)
    old_decay_flat: int = 0  # sampling policy v_old <- d v_old + (1 - d) v after each step, with d = 0
    old_decay_rate: float = 0.001  # before old_decay_flat optimizer steps, then min(old_decay_rate x (steps -
    old_decay_max: float = 0.5  # old_decay_flat), old_decay_max): decay_type 1 (nft.py:60,
    # train_nft_sd3.py:169-189)

    @classmethod
    def check(cls, cfg: Any, errors: ConfigErrors) -> None:
        super().check(cfg, errors)
        m = cfg.method
        if m.group_size >= 1:
            errors.require(
                m.group_size >= 2,
                "method.group_size",
                f"must be >= 2 for per-prompt advantages (got {m.group_size}); the authors use 24",
            )
        errors.require(m.shift > 0, "method.shift", f"must be > 0 (got {m.shift})")
        errors.require(
            m.beta > 0, "method.beta", f"must be > 0 (got {m.beta}): the loss divides by it; the authors use 1 or 0.1"
        )
        errors.require(
            m.kl_beta >= 0, "method.kl_beta", f"must be >= 0 (got {m.kl_beta}); 0 turns the reference term off"
        )
        errors.require(
            m.adv_clip_max > 0, "method.adv_clip_max", f"must be > 0 (got {m.adv_clip_max}); the authors use 5"
        )
        if errors.require(
            0 < m.timestep_fraction <= 1, "method.timestep_fraction", f"must be in (0, 1] (got {m.timestep_fraction})"
        ):
            errors.require(
                int(m.timestep_fraction * m.sampling_steps) >= 1,
                "method.timestep_fraction",
                f"trains floor({m.timestep_fraction} x sampling_steps={m.sampling_steps}) = 0 times per "
                f"sample. Fix: method.timestep_fraction={1.0 / max(1, m.sampling_steps):.3g} or more",
            )
        errors.require(m.old_decay_flat >= 0, "method.old_decay_flat", f"must be >= 0 (got {m.old_decay_flat})")
        errors.require(m.old_decay_rate >= 0, "method.old_decay_rate", f"must be >= 0 (got {m.old_decay_rate})")
        errors.require(
            0 <= m.old_decay_max < 1,
            "method.old_decay_max",
            f"must be in [0, 1) (got "
            f"{m.old_decay_max}); 1 would freeze the sampling policy; the authors use 0.5 or 0.999",
        )


SCHEMAS = {"method": {"diffusion_nft": DiffusionNFTConfig}}
