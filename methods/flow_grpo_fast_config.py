"""Config of method=flow_grpo_fast (flow_grpo train_sd3_fast.py): Flow-GRPO with a short SDE window."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from methods.flow_grpo_config import FlowGRPOConfig
from methods.grpo_config import NoiseKernel
from rewardflow.errors import ConfigErrors


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

    @classmethod
    def check(cls, cfg: Any, errors: ConfigErrors) -> None:
        super().check(cfg, errors)
        check_window(cfg.method, errors)


def check_window(m: Any, errors: ConfigErrors) -> None:
    """``method.window_size`` and ``method.window_range`` of Flow-GRPO-Fast, also JAGG's over it
    (``method.base=flow_grpo_fast``, whose config carries these keys without deriving from this class)."""
    n, size = m.sampling_steps, m.window_size
    if not errors.require(
        len(m.window_range) == 2, "method.window_range", f"must be [lo, hi] (got {list(m.window_range)})"
    ):
        return
    lo, hi = m.window_range
    errors.require(size >= 0, "method.window_size", f"must be >= 0 (got {size}); 0 means the window (0, N-1)")
    errors.require(
        size <= 0 or (0 <= lo <= hi - size and hi <= n - 1),
        "method.window_range",
        f"{[lo, hi]} with window_size={size} does not fit the schedule of sampling_steps={n}: need "
        f"0 <= lo <= hi - window_size and hi <= sampling_steps - 1 = {n - 1} (the last step is never "
        f"trained). Fix: e.g. method.window_range=[0,{min(n - 1, max(size, n // 2))}]",
    )


SCHEMAS = {"method": {"flow_grpo_fast": FlowGRPOFastConfig}}
