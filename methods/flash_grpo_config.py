"""Config of method=flash_grpo (Shredded-Pork/Flash-GRPO @4211013; docs/methods/flash_grpo.md): the official Wan2.1
recipe's values where they do not depend on the model family. The sigma_t kernel follows the family
(docs/methods/flash_grpo.md#the-noise-scale-sigma_t): these defaults suit the image families (Flux / SD3.5 /
Qwen-Image, Flow-GRPO's kernel); the Wan recipe (linear kernel sigma_1 t, UniPC sigmas) is the preset
experiment=flash_grpo_wan."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Optional

from omegaconf import II

from methods.base_config import RecipeLR
from methods.grpo_config import Advantage, Decode, GRPOConfig, NoiseKernel
from methods.schedule_config import Schedule
from rewardflow.errors import ConfigErrors


class SdeIndexSampling(StrEnum):
    iid = "iid"  # independent uniform draws from the pool (the official code)
    stratified = "stratified"  # a permutation of the pool tiled over the prompts of the step


class WeightNorm(StrEnum):
    update = "update"  # mean of 1/lambda over the whole update, across ranks (official code)
    pool = "pool"  # mean over the candidate SDE steps
    none = "none"  # raw 1/lambda (changes the effective learning rate)


@dataclass
class FlashGRPOConfig(GRPOConfig):
    """The SDE step of a rollout is ``k*``; only ``k*`` is trained (``timestep_fraction`` is unused)."""

    _target_: str = "methods.flash_grpo.FlashGRPO"
    name: str = "flash_grpo"
    # LoRA: the official recipes' AdamW 1e-4 (docs/methods/flash_grpo.md); no full fine-tuning recipe is published:
    # DanceGRPO's full rate
    recipe_lr: RecipeLR = field(default_factory=lambda: RecipeLR(lora=1e-4, full=1e-5))
    group_size: int = 8  # 4 rank slots x 2 videos
    prompts_per_step: int = 48  # 2 sampling rounds x 24 prompts per epoch (96 GPUs)
    sampling_steps: int = 20
    update_batch: int = 4  # 2 videos per rank x 2 CFG rows
    shuffle_samples: bool = True  # 2 updates per epoch; every rollout is used in exactly one update
    schedule: Schedule = Schedule.scheduler  # the family's scheduler sigmas (lambda is computed from them, never
    # tabulated)
    noise_kernel: NoiseKernel = NoiseKernel.flow  # image families: sigma_t = a sqrt(t / (1 - t)); Wan: linear
    eta: float = 0.7  # a (flow kernel; Flow-GRPO's SD3 value, 0.9 for Flux) or the linear kernel's
    # multiplier (official: 1)
    quantize_timestep: bool = False  # keep the family's own time input (a Wan backbone floors 1000 sigma itself)
    share_init_noise: bool = False  # one initial latent per group (DanceGRPO); paper and code: fresh per rollout
    init_same_noise: bool = II(".share_init_noise")  # the shared rollout reads this key: set share_init_noise
    decode: Decode = Decode.final
    clip_range: float = 1e-3
    advantage: Advantage = Advantage.prompt  # per-group mean (groups keyed by group id), population std ...
    global_std: bool = True  # ... over all rewards of the step, across ranks (official PerPromptStatTracker)
    kl_rectify: bool = False  # weight the KL by (1/lambda^2)/mean: its gradient scales as lambda^2
    timestep_fraction: float = 1.0  # unused: the trained step is k*
    sde_index_pool: Optional[list[int]] = None  # candidate k*; null = the first half of the steps, range(N // 2)
    sde_index_sampling: SdeIndexSampling = SdeIndexSampling.iid
    iso_temporal: bool = True  # one k* per prompt group; false: one per sample (~ Flow-GRPO-Fast window 1)
    rectify: bool = True  # weight samples by (1/lambda)/mean(1/lambda); false: the "ITG" ablation
    weight_norm: WeightNorm = WeightNorm.update  # the 1/lambda denominator

    @classmethod
    def check(cls, cfg: Any, errors: ConfigErrors) -> None:
        super().check(cfg, errors)
        m = cfg.method
        last = m.sampling_steps - 2
        if m.sde_index_pool is not None:
            pool = list(m.sde_index_pool)
            errors.require(
                len(pool) > 0 and len(set(pool)) == len(pool),
                "method.sde_index_pool",
                f"must be a non-empty list of distinct step indices (got {pool}). Fix: "
                f"method.sde_index_pool=null (the first half of the steps) or e.g. [0,1,2]",
            )
            errors.require(
                all(0 <= k <= last for k in pool),
                "method.sde_index_pool",
                f"indices must lie in [0, sampling_steps - 2 = {last}] (got {pool}): the last step is "
                f"never the SDE step (Delta and lambda are largest there). Fix: "
                f"method.sde_index_pool=null or drop the out-of-range indices",
            )
        errors.require(
            bool(m.init_same_noise) == bool(m.share_init_noise),
            "method.init_same_noise",
            f"Flash-GRPO's switch is method.share_init_noise (got init_same_noise={m.init_same_noise}, "
            f"share_init_noise={m.share_init_noise}). Fix: set method.share_init_noise only",
        )
        errors.require(
            not (m.kl_rectify and m.noise_kernel == NoiseKernel.cps),
            "method.kl_rectify",
            "its 1/lambda^2 weights assume the Gaussian log-prob, where the KL's gradient scales as "
            "lambda^2; under noise_kernel=cps it does not (docs/cps.md). Fix: method.kl_rectify=false, or "
            "another method.noise_kernel",
        )


SCHEMAS = {"method": {"flash_grpo": FlashGRPOConfig}}
