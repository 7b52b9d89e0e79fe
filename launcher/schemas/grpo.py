"""Schemas of the GRPO baselines (method=dance_grpo|flow_grpo|flow_grpo_fast)."""
from __future__ import annotations

from dataclasses import dataclass, field

from omegaconf import MISSING

@dataclass
class GRPOConfig:
    """Shared GRPO knobs (spec jagg_grpo.md §A–C). Defaults are DanceGRPO's; each method YAML sets its own."""

    _target_: str = MISSING
    name: str = MISSING
    group_size: int = 12              # G generations per prompt
    prompts_per_step: int = 2         # prompts per rollout (global, across ranks)
    sampling_steps: int = 16          # N denoising steps
    shift: float = 3.0                # SD3 time shift S
    schedule: str = "linear_shift"    # linear_shift (DanceGRPO) | scheduler (the family's diffusers scheduler)
    noise_kernel: str = "dance"       # dance: g = eta | flow: g = eta * sqrt(sigma / (1 - sigma))
    eta: float = 0.3                  # eta (dance) or noise level a (flow)
    quantize_timestep: bool = False   # feed the model floor(1000 sigma) / 1000 (DanceGRPO)
    init_same_noise: bool = False     # one initial latent per prompt group (DanceGRPO init_same_noise)
    decode: str = "final"             # final: decode x_N (Flow-GRPO) | pred_x0: x0 predicted at the last step (Dance)
    clip_range: float = 1e-4          # PPO epsilon
    adv_clip_max: float = 5.0         # advantages clamped to +-adv_clip_max
    advantage: str = "group"          # group: per-group unbiased std (Dance) | prompt: per-prompt population std
    global_std: bool = False          # prompt mode: std over all rewards of the step
    kl_beta: float = 0.0              # KL to the reference policy (Flow-GRPO); needs a reference model
    kl_exact: bool = False            # divide the KL by |Delta| as the exact Gaussian KL does (spec §C.3)
    timestep_fraction: float = 0.6    # fraction of trainable steps that are trained (rule depends on the method)
    updates_per_rollout: int = 1      # optimizer steps per rollout (DanceGRPO: samples / grad_accum)
    micro_batch: int = 1              # samples per training forward
    shuffle_samples: bool = False     # shuffle samples before splitting them into updates (Flow-GRPO)
    rollout_chunk: int = 32           # rows per transformer call while sampling (CFG rows counted; docs/memory.md)
    decode_chunk: int = 8             # images per VAE decode and per reward call
    trajectory_offload: bool = False  # keep the states the update reads in pinned host memory, not on the GPU


@dataclass
class DanceGRPOConfig(GRPOConfig):
    _target_: str = "methods.dance_grpo.DanceGRPO"
    name: str = "dance_grpo"


@dataclass
class FlowGRPOConfig(GRPOConfig):
    _target_: str = "methods.flow_grpo.FlowGRPO"
    name: str = "flow_grpo"


@dataclass
class FlowGRPOFastConfig(GRPOConfig):
    _target_: str = "methods.flow_grpo_fast.FlowGRPOFast"
    name: str = "flow_grpo_fast"
    window_size: int = 2                                   # SDE steps per rollout (trained steps); 0 = (0, N-1)
    window_range: list[int] = field(default_factory=lambda: [0, 5])   # start drawn from [lo, hi - size]


SCHEMAS = {"method": {"dance_grpo": DanceGRPOConfig, "flow_grpo": FlowGRPOConfig, "flow_grpo_fast": FlowGRPOFastConfig}}
