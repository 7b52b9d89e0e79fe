"""Typed schemas of every config group, registered in Hydra's ConfigStore.

Each YAML option under ``conf/<group>/`` starts from one of these schemas (``defaults: - /schema/<group>/<name>``),
so a misspelt key or a value of the wrong type fails at composition time, before anything is built. Value checks
that need more than a type (ranges, cross-group rules) live in :mod:`launcher.validate`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING


# ---------------------------------------------------------------------------------------------------- methods
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


# ----------------------------------------------------------------------------------------------------- models
@dataclass
class FluxModelConfig:
    _target_: str = "models.flux.FluxBackbone"
    name: str = "flux"
    path: Optional[str] = "black-forest-labs/FLUX.1-dev"   # hub id or local folder
    height: int = 512
    width: int = 512
    guidance: float = 3.5             # FLUX.1-dev distilled guidance (embedded, no CFG)
    max_sequence_length: int = 512
    finetune: str = "lora"            # lora | full
    lora_rank: int = 32
    lora_alpha: float = 64.0
    lora_targets: list[str] = field(default_factory=lambda: ["to_q", "to_k", "to_v", "to_out.0"])
    gradient_checkpointing: bool = False
    device: str = "auto"              # auto: cuda if available, else cpu
    dtype: str = "auto"               # auto: bf16 on GPU, fp32 on CPU


@dataclass
class TinyFluxModelConfig(FluxModelConfig):
    _target_: str = "models.tiny_flux.TinyFluxBackbone"
    name: str = "tiny_flux"
    path: Optional[str] = None        # null: build the tiny twin in cache_dir and load it through FluxBackbone
    seed: int = 0                     # seed of the twin's random weights
    cache_dir: Optional[str] = None   # default $REWARDFLOW_CACHE or ~/.cache/rewardflow


# ---------------------------------------------------------------------------------------------------- rewards
@dataclass
class RewardConfig:
    _target_: str = MISSING
    name: str = MISSING


@dataclass
class JpegRewardConfig(RewardConfig):
    _target_: str = "rewards.jpeg.JpegCompressibility"
    name: str = "jpeg_compressibility"
    quality: int = 95


# ------------------------------------------------------------------------------------------------ data, logger
@dataclass
class DataConfig:
    _target_: str = "launcher.data.PromptSource"
    name: str = MISSING
    prompts: Optional[list[str]] = None   # inline prompt list (data=demo)
    path: Optional[str] = None            # .txt (one prompt per line) or .jsonl file (data=file)
    field: str = "prompt"                 # jsonl key holding the prompt
    shuffle: bool = True                  # reshuffle every epoch (deterministic in trainer.seed)


@dataclass
class WandbLoggerConfig:
    _target_: str = "launcher.wandb_logger.WandbLogger"
    name: str = "wandb"
    project: str = "rewardflow"
    entity: Optional[str] = None
    mode: str = "auto"                # auto: online when WANDB_API_KEY is set, else offline | online | offline
    group: Optional[str] = None       # default: the sweep name for -m runs, else method name
    tags: list[str] = field(default_factory=list)
    run_name: Optional[str] = None    # default: built from the command-line overrides
    log_images: bool = True


@dataclass
class NoLoggerConfig:
    _target_: Optional[str] = None
    name: str = "none"


# ---------------------------------------------------------------------------------------------------- cluster
@dataclass
class LocalClusterConfig:
    name: str = "local"               # in-process, one process


# -------------------------------------------------------------------------------------------- trainer, optim
@dataclass
class TrainerConfig:
    steps: int = 60                   # rollout/update iterations
    seed: int = 0
    max_grad_norm: float = 1.0        # 0 disables clipping
    sample_every: int = 10            # image grid every N steps (W&B and PNG); 0 disables
    num_sample_images: int = 8
    max_nonfinite_in_a_row: int = 3   # abort after this many consecutive skipped (NaN/Inf) updates
    threads: int = 0                  # torch CPU threads; 0 = all cores
    progress: bool = True             # progress bar with reward and s/step


@dataclass
class OptimizerConfig:
    _target_: str = "torch.optim.AdamW"
    _partial_: bool = True
    lr: float = 1e-5
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    weight_decay: float = 1e-4
    eps: float = 1e-8


@dataclass
class TrainConfig:
    method: Any = MISSING
    model: Any = MISSING
    reward: Any = MISSING
    data: Any = MISSING
    cluster: Any = MISSING
    logger: Any = MISSING
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    task_name: str = "train"
    output_root: str = "outputs"


SCHEMAS: dict[str, dict[str, type]] = {
    "method": {"dance_grpo": DanceGRPOConfig, "flow_grpo": FlowGRPOConfig, "flow_grpo_fast": FlowGRPOFastConfig},
    "model": {"flux": FluxModelConfig, "tiny_flux": TinyFluxModelConfig},
    "reward": {"base": RewardConfig, "jpeg": JpegRewardConfig},
    "data": {"prompts": DataConfig},
    "logger": {"wandb": WandbLoggerConfig, "none": NoLoggerConfig},
    "cluster": {"local": LocalClusterConfig},
}


def register_configs() -> None:
    cs = ConfigStore.instance()
    cs.store(name="train_schema", node=TrainConfig)
    for group, entries in SCHEMAS.items():
        for name, node in entries.items():
            cs.store(group=f"schema/{group}", name=name, node=node)
