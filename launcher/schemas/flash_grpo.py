"""Schema of Flash-GRPO (method=flash_grpo; spec flash_grpo.md)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from launcher.schemas.grpo import GRPOConfig


@dataclass
class FlashGRPOConfig(GRPOConfig):
    """Flash-GRPO knobs on top of the shared GRPO ones (conf/method/flash_grpo.yaml sets the official values).

    The SDE step of a rollout is ``k*``; ``timestep_fraction`` is unused (Flash-GRPO trains exactly ``k*``).
    """

    _target_: str = "methods.flash_grpo.FlashGRPO"
    name: str = "flash_grpo"
    sde_index_pool: Optional[List[int]] = None   # candidate k*; null = first half of the steps, range(N // 2) (§B.2)
    sde_index_sampling: str = "iid"              # iid (official code) | stratified over the prompts of a batch (§G.1)
    iso_temporal: bool = True                    # one k* per prompt group; false: one per sample (~ Fast1, §F.14)
    rectify: bool = True                         # weight samples by (1/lambda)/mean(1/lambda); false: "ITG" (§C.2)
    weight_norm: str = "update"                  # update (across ranks) | pool | none: the 1/lambda denominator (§G.2)
    share_init_noise: bool = False               # one initial latent per group (DanceGRPO); paper: fresh (§G.6)
    kl_rectify: bool = False                     # weight the KL by (1/lambda^2)/mean: its gradient scales as lambda^2
    pre_update_clip_warn: float = 0.05           # warn when the rollout-vs-replay clip fraction exceeds this (§G.7)


SCHEMAS = {"method": {"flash_grpo": FlashGRPOConfig}}
