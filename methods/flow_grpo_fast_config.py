"""Config of method=flow_grpo_fast (flow_grpo train_sd3_fast.py): Flow-GRPO with a short SDE window."""

from __future__ import annotations

from dataclasses import dataclass, field

from methods.flow_grpo_config import FlowGRPOConfig
from methods.grpo_config import NoiseKernel


@dataclass
class FlowGRPOFastConfig(FlowGRPOConfig):
    _target_: str = "methods.flow_grpo_fast.FlowGRPOFast"
    name: str = "flow_grpo_fast"
    noise_kernel: NoiseKernel = NoiseKernel.cps  # coefficient-preserving sampling (docs/cps.md), as upstream's
    # SD3.5-M and FLUX.1 Fast configs set it (flow_grpo config/grpo.py @54809b5:
    # *_sd3_fast_nocfg, *_flux_fast)
    eta: float = 0.8  # noise level a: std = sigma_next sin(a pi / 2)
    clip_range: float = 1e-5
    kl_beta: float = 0.0  # all Fast configs train without KL
    timestep_fraction: float = 1.0  # unused: the window decides the trained steps
    window_size: int = 2  # SDE (= trained) steps per rollout; 0 = the window (0, N-1)
    window_range: list[int] = field(default_factory=lambda: [0, 5])  # window start drawn uniformly from
    # [lo, hi - window_size], once per rollout batch


SCHEMAS = {"method": {"flow_grpo_fast": FlowGRPOFastConfig}}
