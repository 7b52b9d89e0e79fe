"""Sigma schedules for rectified-flow sampling (docs/methods/grpo_baselines.md#sigma-schedules).

Time runs from noise (sigma = 1) to data (sigma = 0); ``x_sigma = (1 - sigma) x0 + sigma eps``.
Two schedules exist in the baselines and both are kept on purpose:

* ``linear_shift`` (DanceGRPO, every model): ``s_i = 1 - i/N`` then the SD3 time shift.
* ``scheduler`` (Flow-GRPO): the model family's diffusers scheduler, set up as the family's pipeline does (static
  shift for SD3.5, resolution-dependent shift for FLUX.1 / Qwen-Image, UniPC flow sigmas for Wan2.1; see
  :func:`scheduler_sigmas`); we take its ``sigmas`` as they are.
"""
from __future__ import annotations

import torch

SCHEDULES = ("linear_shift", "scheduler")


def time_shift(s: torch.Tensor, shift: float) -> torch.Tensor:
    """SD3 time shift ``S s / (1 + (S - 1) s)``; S > 1 spends more steps at high noise."""
    return shift * s / (1.0 + (shift - 1.0) * s)


def linear_shift_sigmas(num_steps: int, shift: float) -> torch.Tensor:
    """DanceGRPO schedule: N + 1 float64 sigmas from exactly 1 down to exactly 0."""
    s = 1.0 - torch.arange(num_steps + 1, dtype=torch.float64) / num_steps
    return time_shift(s, shift)


def scheduler_sigmas(num_steps: int, shift: float, scheduler_config: dict | None = None) -> torch.Tensor:
    """The N + 1 sigmas (float64, last 0) of the family's diffusers scheduler, set up as the family's pipeline does.

    ``scheduler_config`` is a backbone's :meth:`~models.backbone.Backbone.scheduler_config`: the diffusers config
    plus private keys (dropped by diffusers' ``from_config``) describing the pipeline's ``set_timesteps`` call:

    * ``FlowMatchEulerDiscreteScheduler``, static shift (SD3.5; also the default with no config): ``shift`` replaces
      the config's, ``set_timesteps(N)`` (its endpoint is shifted twice, a diffusers quirk kept on purpose:
      docs/methods/grpo_baselines.md#sigma-schedules).
    * ``_rewardflow_custom_sigmas`` (FLUX.1, Qwen-Image): the pipeline passes ``sigmas = linspace(1, 1/N, N)``; with
      ``use_dynamic_shifting`` the shift is resolution-dependent, ``mu = calculate_shift(_rewardflow_image_seq_len,
      ...)`` from the config (``shift`` is then unused), otherwise ``shift`` is applied statically.
    * ``UniPCMultistepScheduler`` with flow sigmas (Wan2.1): ``flow_shift = shift``; the steps are Euler steps on its
      grid (as Flow-GRPO / Flash-GRPO do). UniPC lowers a first sigma of 1 by 1e-6 only to keep its multistep
      ``log(alpha)`` finite; that guard is undone here so the first step is exactly the pure-noise level.
    """
    import numpy as np

    config = dict(scheduler_config or {})
    seq_len = config.pop("_rewardflow_image_seq_len", None)
    custom = bool(config.pop("_rewardflow_custom_sigmas", False))
    if config.get("_class_name") == "UniPCMultistepScheduler":
        from diffusers import UniPCMultistepScheduler

        if not config.get("use_flow_sigmas", False):
            raise ValueError("a UniPC scheduler without use_flow_sigmas is not a flow-matching schedule")
        config.update(flow_shift=shift, use_dynamic_shifting=False)
        sched = UniPCMultistepScheduler.from_config(config)
        sched.set_timesteps(num_steps)
        sigmas = sched.sigmas.to(torch.float64)
        if abs(float(sigmas[0]) - 1.0) < 1e-5:
            sigmas[0] = 1.0
        return sigmas

    from diffusers import FlowMatchEulerDiscreteScheduler

    if custom:
        dynamic = bool(config.get("use_dynamic_shifting", False))
        if not dynamic:
            config["shift"] = shift
        sched = FlowMatchEulerDiscreteScheduler.from_config(config)
        mu = None
        if dynamic:
            if seq_len is None:
                raise ValueError("dynamic shifting needs the image token count (_rewardflow_image_seq_len)")
            mu = calculate_shift(seq_len, config.get("base_image_seq_len", 256), config.get("max_image_seq_len", 4096),
                                 config.get("base_shift", 0.5), config.get("max_shift", 1.15))
        sched.set_timesteps(sigmas=np.linspace(1.0, 1 / num_steps, num_steps), mu=mu)
        return sched.sigmas.to(torch.float64)

    config.update(shift=shift, use_dynamic_shifting=False)
    sched = FlowMatchEulerDiscreteScheduler.from_config(config)
    sched.set_timesteps(num_steps)
    return sched.sigmas.to(torch.float64)


def calculate_shift(image_seq_len: int, base_seq_len: int = 256, max_seq_len: int = 4096, base_shift: float = 0.5,
                    max_shift: float = 1.15) -> float:
    """FLUX / Qwen-Image resolution-dependent shift ``mu`` (linear in the image token count), as in diffusers."""
    m = (max_shift - base_shift) / (max_seq_len - base_seq_len)
    return image_seq_len * m + (base_shift - m * base_seq_len)


def make_sigmas(kind: str, num_steps: int, shift: float, scheduler_config: dict | None = None) -> torch.Tensor:
    if kind == "linear_shift":
        return linear_shift_sigmas(num_steps, shift)
    if kind == "scheduler":
        return scheduler_sigmas(num_steps, shift, scheduler_config)
    raise ValueError(f"unknown sigma schedule {kind!r}; expected one of {SCHEDULES}")


def quantize_model_time(sigma: torch.Tensor) -> torch.Tensor:
    """DanceGRPO feeds the transformer floor(1000 sigma) / 1000; the SDE itself uses exact sigma."""
    return torch.floor(sigma * 1000.0) / 1000.0
