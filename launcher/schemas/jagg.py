"""Schema of method=jagg (spec jagg_grpo.md §D): JAGG over a GRPO baseline chosen by ``base``."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from launcher.schemas.grpo import GRPOConfig


@dataclass
class JAGGConfig(GRPOConfig):
    """Every GRPO knob (the baseline's sampler, advantages, loss; conf/method/jagg.yaml takes the chosen baseline's
    stock values from ``stock.<base>``), plus JAGG's own."""

    _target_: str = "methods.jagg.JAGG"
    name: str = "jagg"
    base: str = "dance_grpo"          # dance_grpo | flow_grpo | flow_grpo_fast: the baseline JAGG accelerates
    window: int = 4                   # W: consecutive trained steps per group (>= 2; 2 is exact but saves nothing)
    jagg_frac: float = 0.6            # JAGG on the first floor(jagg_frac G) (high-noise) groups, exact on the rest
    group_fraction: float = 1.0       # a step trains a random floor(group_fraction G) of the G groups (prototype)
    alpha: str = "sigma"              # sigma: t-weights on the exact schedule | model_time: on the model's input time
                                      # | index: j / (W - 1) (the prototype's; not exact on a shifted schedule)
    ablation: str = "none"            # none | endpoints_only | nearest_endpoint (spec §D.6, definition unconfirmed)
    remainder: str = "exact"          # M mod W != 0 -> exact: a trailing exact group | error: reject the config
    diagnose_every: int = 0           # every N steps, also compute exact gradients of the first micro-batch's
                                      # groups and log jagg/cos_group_<g>, jagg/rel_err_group_<g>; 0 = off
    window_size: int = 4              # base=flow_grpo_fast: SDE window (trained steps); 0 = (0, N-1)
    window_range: list[int] = field(default_factory=lambda: [0, 5])
    stock: dict[str, Any] = field(default_factory=dict)   # per-base stock values the YAML interpolates from


SCHEMAS = {"method": {"jagg": JAGGConfig}}
