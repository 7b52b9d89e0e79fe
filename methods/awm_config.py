"""Config of method=awm: Advantage Weighted Matching (Xue et al., arXiv:2509.25050; docs/methods/awm.md) on
DiffusionNFT's forward-process machinery. Defaults: the authors' SD3.5-M PickScore recipe, pinned to
scxue/advantage_weighted_matching @be51372 (``advantage_weighted_matching/config/dgx_awm.py``
``pickscore_sd3_no_cfg_1node``, lines 309-377, on ``config/base_awm.py``; the loss in ``scripts/train_sd3_awm.py``).
Paths below are relative to their ``advantage_weighted_matching/`` folder."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from methods.base_config import RecipeLR
from methods.diffusion_nft_config import AdvMode, DiffusionNFTConfig, Sampler
from rewardflow.errors import ConfigErrors


class TimeSampling(StrEnum):
    """Which grid times a sample trains (their ``config.time_type``, train_sd3_awm.py:1172-1205; methods/awm_times.py):
    T stratified draws, one per equal slice of the grid indices below ``int(fraction x N)``."""

    discrete = "discrete"  # slices of [0, int(fraction x N)]: index 0 (sigma = 1) may be drawn
    discrete_wo_init = "discrete_wo_init"  # slices of [1, int(fraction x N)]: never index 0
    discrete_with_init = "discrete_with_init"  # index 0 always, then T - 1 slices of [1, int(fraction x N)]


class Weighting(StrEnum):
    """How the per-row flow-matching error e = mean (v - (eps - x0))^2 becomes the log-likelihood surrogate
    (their ``compute_log_prob_awm`` ``weighting``, train_sd3_awm.py:240-251; methods/awm_loss.py)."""

    uniform = "uniform"  # -e (their "Uniform")
    t = "t"  # -e sigma
    t2 = "t2"  # -e sigma^2 (their "t**2")
    huber = "huber"  # -(sqrt(e + 1e-10) - 1e-5) sigma
    ghuber = "ghuber"  # -((e + 1e-10)^p - 1e-10^p) sigma / p, p = ghuber_power


class KLWeight(StrEnum):
    """How a velocity KL term is weighted per row (their ``kl_weight`` / ``kl_ema_weight``, train_sd3_awm.py:1334-1348)."""

    uniform = "uniform"  # mean (v - v')^2 (their "Uniform")
    elbo = "elbo"  # mean (v - v')^2 / (2 s^2), s = 0.7 sqrt(sigma / (1 - min(sigma, 0.99))) (their "ELBO")


@dataclass
class AWMConfig(DiffusionNFTConfig):
    _target_: str = "methods.awm.AWM"
    name: str = "awm"
    # LoRA: base_awm.py:70 (dgx_awm.py:340); no full fine-tuning is published: DanceGRPO's full rate (ours)
    recipe_lr: RecipeLR = field(default_factory=lambda: RecipeLR(lora=3e-4, full=1e-5))
    group_size: int = 24  # images per prompt (dgx_awm.py:323 sample.num_image_per_prompt)
    prompts_per_step: int = 24  # 6 samples per GPU x 8 GPUs x 12 batches / 24 per prompt (dgx_awm.py:320-324)
    sampling_steps: int = 14  # N rollout steps (dgx_awm.py:315)
    updates_per_rollout: int = 1  # one optimizer step per rollout: gradient_accumulation_steps = every batch
    # (dgx_awm.py:330-331), which keeps the update on policy
    update_batch: int = 12  # rows per call: train.batch_size 2 samples x train_timesteps 6 (dgx_awm.py:329, 334)
    sampler: Sampler = Sampler.unipc  # theirs is SA-Solver (train.use_sa_solver, dgx_awm.py:349) with
    # noise_level 0 (dgx_awm.py:326): a deterministic order-2 predictor-corrector, not ported; UniPC is one of the
    # same kind; euler is exactly their use_sa_solver=False path (docs/methods/awm.md#sampling)
    kl_beta: float = 1.0e-4  # weight of mean (v - v_ref)^2 to the frozen pretrained model (dgx_awm.py:333 train.beta)
    adv_clip_max: float = 5.0  # advantages clamped to +-adv_clip_max (base_awm.py:91) ...
    advantage_max: float = 1.0  # ... then scaled to +-advantage_max (dgx_awm.py:336; train_sd3_awm.py:1293-1299)
    timestep_fraction: float = 0.9  # the trained grid indices stay below int(fraction x N) (dgx_awm.py:338)
    train_timesteps: int = 6  # T trained times per sample (dgx_awm.py:334)
    time_sampling: TimeSampling = TimeSampling.discrete  # dgx_awm.py:367 (discrete_wo_init for GenEval and OCR)
    weighting: Weighting = Weighting.ghuber  # dgx_awm.py:341
    ghuber_power: float = 0.25  # p of the generalised Huber weighting (dgx_awm.py:342)
    clip_range: float = 1.0  # PPO clip of exp(log p - log p_old) (dgx_awm.py:365); on policy the ratio is 1
    kl_weight: KLWeight = KLWeight.uniform  # dgx_awm.py:335
    # the EMA policy: a lagging copy of the trained weights, v_ema <- d v_ema + (1 - d) v after each step, with
    # d = min(old_decay_rate x optimizer steps, old_decay_max) (their second adapter "ema", train_sd3_awm.py:649-659,
    # 1409-1419; kl_ema_decay_type linear, dgx_awm.py:345-346; DiffusionNFT's v_old machinery)
    ema_kl_beta: float = 1.0  # weight of mean (v - v_ema)^2 (dgx_awm.py:347 train.ema_beta)
    ema_kl_weight: KLWeight = KLWeight.uniform  # dgx_awm.py:344 kl_ema_weight
    old_decay_rate: float = 0.001  # train_sd3_awm.py:1413
    old_decay_max: float = 0.3  # dgx_awm.py:345 kl_ema_decay
    off_policy: bool = False  # sample with the EMA policy and weigh by exp(log p - log p_ema), clipped
    # (dgx_awm.py:348 train.off_policy; train_sd3_awm.py:882-883, 1233-1240)

    @classmethod
    def check(cls, cfg: Any, errors: ConfigErrors) -> None:
        super().check(cfg, errors)
        m = cfg.method
        for key, default in (("beta", 1.0), ("adv_mode", AdvMode.all)):
            errors.require(
                getattr(m, key) == default,
                f"method.{key}",
                f"is DiffusionNFT's and not used by method=awm (got {getattr(m, key)}). Fix: remove the override; "
                "AWM's own keys are listed in docs/methods/awm.md#keys",
            )
        errors.require(m.train_timesteps >= 1, "method.train_timesteps", f"must be >= 1 (got {m.train_timesteps})")
        errors.require(m.advantage_max > 0, "method.advantage_max", f"must be > 0 (got {m.advantage_max})")
        errors.require(m.ghuber_power > 0, "method.ghuber_power", f"must be > 0 (got {m.ghuber_power})")
        errors.require(m.clip_range > 0, "method.clip_range", f"must be > 0 (got {m.clip_range})")
        errors.require(m.ema_kl_beta >= 0, "method.ema_kl_beta", f"must be >= 0 (got {m.ema_kl_beta})")
        errors.require(
            m.off_policy or m.updates_per_rollout == 1,
            "method.updates_per_rollout",
            f"must be 1 on policy (got {m.updates_per_rollout}): the log-likelihood ratio of a later update needs "
            "the rollout policy's, which the authors' on-policy recipe never computes (one optimizer step per "
            "rollout). Fix: method.updates_per_rollout=1, or method.off_policy=true (ratio to the EMA policy)",
        )


SCHEMAS = {"method": {"awm": AWMConfig}}
