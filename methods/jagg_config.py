"""Config of method=jagg (Ding et al., arXiv:2607.17572; docs/methods/jagg.md): JAGG over the GRPO baseline chosen
by ``base``. Every sampler / advantage / trained-step key follows that baseline's stock value (``stock.<base>``:
the baseline's own config defaults, except where JAGG adapts them), and any of them can still be set directly."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import Any

from omegaconf import II

from methods.dance_grpo_config import DanceGRPOConfig
from methods.flow_grpo_config import FlowGRPOConfig
from methods.flow_grpo_fast_config import FlowGRPOFastConfig, check_window
from methods.grpo_config import Advantage, Decode, GRPOConfig, NoiseKernel
from methods.schedule_config import Schedule
from methods.trained_steps import jagg_fix_hint, jagg_trainable, jagg_trained_rule
from rewardflow.errors import ConfigErrors


class JAGGBase(StrEnum):
    dance_grpo = "dance_grpo"
    flow_grpo = "flow_grpo"
    flow_grpo_fast = "flow_grpo_fast"


class Alpha(StrEnum):
    sigma = "sigma"  # t-weights on the exact sigma schedule
    model_time = "model_time"  # on the time the model is fed (DanceGRPO's floor(1000 sigma) / 1000)
    # a member named like str.index: the config value is "index" (the enum's member shadows the str method)
    index = "index"  # type: ignore[assignment]  # j / (W - 1), the prototype's (not exact on a shifted schedule)


class Ablation(StrEnum):
    none = "none"
    endpoints_only = "endpoints_only"  # s_0 and s_{W-1} only: the same cost, as if 2 of W steps were trained
    nearest_endpoint = "nearest_endpoint"  # alpha rounded to {0, 1} (definition unconfirmed)


class Remainder(StrEnum):
    exact = "exact"  # M mod W trained steps left over: one exact group at the low-noise end
    error = "error"  # reject such configs, naming the sampling_steps that fit


#: the keys whose value is the chosen baseline's (``method.<key>`` interpolates ``method.stock.<base>.<key>``)
STOCK_KEYS = (
    "group_size",
    "prompts_per_step",
    "sampling_steps",
    "schedule",
    "noise_kernel",
    "eta",
    "quantize_timestep",
    "init_same_noise",
    "decode",
    "clip_range",
    "advantage",
    "global_std",  # Flow-GRPO's and Fast's advantage divides by the step's std (upstream config/base.py)
    "kl_beta",
    "timestep_fraction",
    "shuffle_samples",
    "window_size",
)


def _stock(baseline: GRPOConfig, **jagg: Any) -> dict[str, Any]:
    values = {k: getattr(baseline, k, 0) for k in STOCK_KEYS}  # window_size: 0 (unused) off Flow-GRPO-Fast
    values.update(jagg)
    return {k: v.value if isinstance(v, Enum) else v for k, v in values.items()}


def jagg_stock() -> dict[str, dict[str, Any]]:
    """Per-base stock values: each baseline's config defaults, with JAGG's adaptations and its ``jagg_frac``
    (docs/methods/jagg.md#which-steps-are-trained-per-baseline)."""
    return {
        # DanceGRPO trains a random 60 % of the steps, which cannot form groups of consecutive steps:
        # JAGG trains all N-1 steps in groups (group_fraction subsamples groups instead); 21 sampling steps give 20
        # trained steps = 5 groups of 4 (the author's Qwen-Image script; Flux: 17). jagg_frac 0.6: the paper's.
        "dance_grpo": _stock(DanceGRPOConfig(), sampling_steps=21, timestep_fraction=1.0, jagg_frac=0.6),
        # trains floor(0.99 N) = 9 of 10 steps: 2 groups of 4 + an exact tail step
        "flow_grpo": _stock(FlowGRPOConfig(), jagg_frac=0.6),
        # one group of W = 4 SDE steps (the stock window of 2 saves nothing); the window is
        # high-noise (start in [0, 1]), so it is the JAGG group
        "flow_grpo_fast": _stock(FlowGRPOFastConfig(), window_size=4, jagg_frac=1.0),
    }


def _from_stock(key: str) -> Any:
    return II(f".stock.${{.base}}.{key}")


@dataclass
class JAGGConfig(GRPOConfig):
    """Every GRPO knob (the chosen baseline's sampler, advantages and loss), plus JAGG's own."""

    _target_: str = "methods.jagg.JAGG"
    name: str = "jagg"
    base: JAGGBase = JAGGBase.dance_grpo  # the baseline JAGG accelerates
    window: int = 4  # W: consecutive trained steps per group (>= 2; 2 is exact but saves nothing)
    jagg_frac: float = _from_stock("jagg_frac")  # JAGG on groups 0 .. floor(jagg_frac G) - 1, the high-noise end;
    # exact backward on the rest (0: the baseline's backward, bit for bit)
    group_fraction: float = 1.0  # 1: every step trains all groups (paper); < 1: a random subset per step
    alpha: Alpha = Alpha.sigma  # the t-weights
    ablation: Ablation = Ablation.none
    remainder: Remainder = Remainder.exact
    diagnose_every: int = 0  # N > 0: every N steps, also compute exact gradients of the first micro-batch's
    # groups and log jagg/cos_group_<g>, jagg/rel_err_group_<g> (extra passes)
    group_size: int = _from_stock("group_size")
    prompts_per_step: int = _from_stock("prompts_per_step")
    sampling_steps: int = _from_stock("sampling_steps")
    schedule: Schedule = _from_stock("schedule")
    noise_kernel: NoiseKernel = _from_stock("noise_kernel")
    eta: float = _from_stock("eta")
    quantize_timestep: bool = _from_stock("quantize_timestep")
    init_same_noise: bool = _from_stock("init_same_noise")
    decode: Decode = _from_stock("decode")
    clip_range: float = _from_stock("clip_range")
    advantage: Advantage = _from_stock("advantage")
    global_std: bool = _from_stock("global_std")
    kl_beta: float = _from_stock("kl_beta")
    timestep_fraction: float = _from_stock("timestep_fraction")
    shuffle_samples: bool = _from_stock("shuffle_samples")
    window_size: int = _from_stock("window_size")  # base=flow_grpo_fast: the SDE window (trained steps)
    window_range: list[int] = field(default_factory=lambda: [0, 5])  # base=flow_grpo_fast: the window's start range
    stock: dict[str, Any] = field(default_factory=jagg_stock)  # per-base stock values the keys above follow

    @classmethod
    def check(cls, cfg: Any, errors: ConfigErrors) -> None:
        """The baseline's own checks (GRPO's; over Flow-GRPO-Fast its window's too), then JAGG's groups against the
        steps the baseline trains (methods/trained_steps.py)."""
        super().check(cfg, errors)
        m = cfg.method
        if m.base == JAGGBase.flow_grpo_fast:
            check_window(m, errors)
        window_ok = errors.require(
            m.window >= 2,
            "method.window",
            f"must be >= 2 (got {m.window}): a group needs two "
            f"endpoints; JAGG saves W - 2 backward passes per group (the paper uses 4)",
        )
        errors.require(
            0 <= m.jagg_frac <= 1,
            "method.jagg_frac",
            f"must be in [0, 1] (got {m.jagg_frac}): the "
            f"fraction of groups, from the high-noise end, that use JAGG (0 = exact baseline, paper 0.6)",
        )
        errors.require(
            0 < m.group_fraction <= 1, "method.group_fraction", f"must be in (0, 1] (got {m.group_fraction})"
        )
        errors.require(
            m.diagnose_every >= 0, "method.diagnose_every", f"must be >= 0 (got {m.diagnose_every}); 0 disables it"
        )
        if not window_ok:
            return
        steps, w = jagg_trainable(m), int(m.window)
        rule = jagg_trained_rule(m)
        if not errors.require(
            steps >= w,
            "method.window",
            f"W = {w}, but {rule}, fewer than one group of {w}. "
            f"Fix: {jagg_fix_hint(m, w)} or a smaller method.window (2 is exact but saves "
            f"nothing)",
        ):
            return
        errors.require(
            not steps % w or m.remainder != Remainder.error,
            "method.window",
            f"W = {w}, but {rule}, not a multiple of {w} (method.remainder=error). Fix: "
            f"{jagg_fix_hint(m, w)}, or method.remainder=exact (the last {steps % w} steps then form "
            f"an exact group)",
        )


SCHEMAS = {"method": {"jagg": JAGGConfig}}
