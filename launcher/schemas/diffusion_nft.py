"""Schema of DiffusionNFT (method=diffusion_nft; Zheng et al., arXiv:2509.16117; docs/methods/diffusion_nft.md).

Defaults are the authors' SD3.5-M values (NVlabs/DiffusionNFT ``config/nft.py`` ``_get_config`` and
``config/base.py``); ``conf/method/diffusion_nft.yaml`` restates them with their sources, and
``experiment=nft_sd35m`` is their multi-reward recipe.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class DiffusionNFTConfig:
    _target_: str = "methods.diffusion_nft.DiffusionNFT"
    name: str = "diffusion_nft"
    group_size: int = 24              # images per prompt (sample.num_image_per_prompt)
    prompts_per_step: int = 48        # prompt groups per rollout, global across ranks
    sampling_steps: int = 10          # N rollout solver steps (sample.num_steps)
    sampler: str = "dpmpp_2m"         # euler | dpmpp_2m | unipc: the diffusers scheduler of the rollout (solver dpm2)
    schedule: str = "scheduler"       # sigma grid of the rollout and of the trained times: scheduler | linear_shift
    shift: float = 3.0                # time shift of the grid (static-shift families)
    quantize_rollout_time: bool = False   # feed the model floor(1000 sigma)/1000 while sampling (their SD3 pipeline)
    beta: float = 1.0                 # positive/negative mixing coefficient (config.beta)
    kl_beta: float = 1.0e-4           # weight of mean ||v - v_ref||^2 to the frozen pretrained model (train.beta)
    adv_clip_max: float = 5.0         # advantages clamped to +-adv_clip_max, then r = 1/2 + A / (2 adv_clip_max)
    advantage: str = "prompt"         # group means by prompt (prompt) or by group id (group)
    global_std: bool = True           # prompt mode: divide by the std of all the step's rewards (sample.global_std)
    adv_mode: str = "all"             # all | positive_only | negative_only | one_only | binary (train.adv_mode)
    timestep_fraction: float = 0.99   # each sample trains floor(fraction x N) random grid times (timestep_fraction)
    old_decay_flat: int = 0           # sampling policy v_old <- d v_old + (1 - d) v after each step, with
    old_decay_rate: float = 0.001     #   d = 0 before old_decay_flat optimizer steps, then
    old_decay_max: float = 0.5        #   min(old_decay_rate x (steps - old_decay_flat), old_decay_max) (decay_type 1)
    updates_per_rollout: int = 1      # optimizer steps per rollout (gradient_step_per_epoch)
    update_batch: int = 9             # (sample, trained time) rows per transformer call of the update


SCHEMAS = {"method": {"diffusion_nft": DiffusionNFTConfig}}
