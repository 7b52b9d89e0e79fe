"""Config of method=eam (a reconstruction: docs/methods/eam.md#eam, #what-is-reconstructed): few-step ODE endpoint,
kernel samples q_t(.|X_1), closed-form adjoint of a linear memoryless base, corrected terminal cost."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from methods.schedule_config import Schedule
from methods.soc_base_config import SOCConfig
from rewardflow.errors import ConfigErrors


class TerminalScore(StrEnum):
    tweedie_shrink = "tweedie_shrink"  # (1-delta)^2/delta (v_pre((1-delta) X1, 1-delta) - X1): the unbiased one
    tweedie_naive = "tweedie_naive"  # biased
    anchor = "anchor"  # Option B (biased): no terminal score, a frozen forward per loss time


class TimeSampling(StrEnum):
    uniform = "uniform"  # t ~ U[t_min, 1 - t_min]
    stratified = "stratified"  # one uniform draw in each of loss_timesteps equal bins of that interval
    am_grid = "am_grid"  # AM parity: on the grid k / sampling_steps, the last ones plus random earlier ones


class LossWeight(StrEnum):
    memoryless = "memoryless"  # 4 / sigma(t)^2: the AM loss in velocity form
    none = "none"


@dataclass
class EAMConfig(SOCConfig):
    _target_: str = "methods.eam.EAM"
    name: str = "eam"
    prompts_per_step: int = 32
    sampling_steps: int = 40  # the grid of time_sampling=am_grid (AM parity); unused otherwise
    c: float = 1.0  # [R] the linear base's terminal law N(0, c^2 I) (1 suits unit-variance latents)
    endpoint_nfe: int = 10  # Euler ODE steps of the endpoint X_1
    endpoint_schedule: Schedule = Schedule.scheduler  # the endpoint's sigma grid
    endpoint_shift: float = 3.0  # time shift of the endpoint grid (SD3.5: 3)
    terminal_score: TerminalScore = TerminalScore.tweedie_shrink  # [R]
    delta: float = 0.02  # [R] t' = 1 - delta of the Tweedie terminal score
    loss_timesteps: int = 4  # [R] K_t loss times per sample (4 fast; 20 with time_sampling=am_grid: AM parity)
    time_sampling: TimeSampling = TimeSampling.uniform  # [R]
    t_min: float = 0.025  # [R] loss times avoid [0, t_min) and (1 - t_min, 1]
    loss_weight: LossWeight = LossWeight.memoryless  # [R]
    # loss_clip stays 0: AM's LCT is an AM trick (loss_clip=1.6 to use it); (lambda |grad r| must compete with
    # |s_pre + X_1| of the terminal cost when sizing reward_scale)

    @classmethod
    def check(cls, cfg: Any, errors: ConfigErrors) -> None:
        super().check(cfg, errors)
        m = cfg.method
        errors.require(
            m.c > 0,
            "method.c",
            f"must be > 0 (got {m.c}): the base's terminal law is N(0, c^2 I); 1 "
            f"suits unit-variance latents (c -> infinity diverges, docs/methods/eam.md#the-linear-base)",
        )
        errors.require(
            m.endpoint_nfe >= 1, "method.endpoint_nfe", f"must be >= 1 (got {m.endpoint_nfe}); the default is 10"
        )
        errors.require(m.endpoint_shift > 0, "method.endpoint_shift", f"must be > 0 (got {m.endpoint_shift})")
        errors.require(0 < m.delta < 0.5, "method.delta", f"must be in (0, 0.5) (got {m.delta}); try 0.01..0.05")
        errors.require(
            m.loss_timesteps >= 1,
            "method.loss_timesteps",
            f"must be >= 1 (got {m.loss_timesteps}); 4 (fast) or 20 (AM parity)",
        )
        errors.require(0 < m.t_min < 0.5, "method.t_min", f"must be in (0, 0.5) (got {m.t_min}); the default is 1/40")
        if m.time_sampling == TimeSampling.am_grid:
            errors.require(
                m.loss_timesteps <= m.sampling_steps,
                "method.loss_timesteps",
                f"must be <= sampling_steps={m.sampling_steps} with time_sampling=am_grid (got {m.loss_timesteps})",
            )


SCHEMAS = {"method": {"eam": EAMConfig}}
