"""The sigma grids of the families' diffusers schedulers, set up as each family's pipeline calls ``set_timesteps``
(``method.schedule=scheduler``; a backbone's :meth:`~models.backbone.Backbone.sigmas` picks its family's):

* :func:`static_shift_sigmas`: ``FlowMatchEulerDiscreteScheduler`` with a static shift, ``set_timesteps(N)`` (SD3.5;
  also the default). Its endpoint is shifted twice, a diffusers quirk kept on purpose.
* :func:`custom_sigmas`: the pipeline passes ``sigmas = linspace(1, 1/N, N)``, with the resolution-dependent shift
  ``mu`` of the image token count when the scheduler uses dynamic shifting (FLUX.1, Qwen-Image).
* :func:`unipc_flow_sigmas`: ``UniPCMultistepScheduler`` flow sigmas with ``flow_shift`` (Wan2.1), stepped with Euler
  as Flow-GRPO / Flash-GRPO do.

Each returns the N + 1 sigmas in float64, from the pure-noise level down to 0.
"""

from __future__ import annotations

import torch


def static_shift_sigmas(num_steps: int, shift: float, config: dict | None = None) -> torch.Tensor:
    """``FlowMatchEulerDiscreteScheduler`` (``config``: the family's scheduler config) with ``shift`` replacing the
    config's."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    sched = FlowMatchEulerDiscreteScheduler.from_config(
        {**(config or {}), "shift": shift, "use_dynamic_shifting": False}
    )
    sched.set_timesteps(num_steps)
    return sched.sigmas.to(torch.float64)


def custom_sigmas(
    num_steps: int, shift: float, config: dict, image_seq_len: int, dynamic_shift: bool = True
) -> torch.Tensor:
    """FluxPipeline / QwenImagePipeline's grid: ``sigmas = linspace(1, 1/N, N)``; with ``dynamic_shift`` and a
    scheduler that shifts dynamically, ``mu = calculate_shift(image_seq_len, ...)`` from the config (``shift`` is then
    unused), otherwise ``shift`` is applied statically."""
    import numpy as np
    from diffusers import FlowMatchEulerDiscreteScheduler

    dynamic = dynamic_shift and bool(config.get("use_dynamic_shifting", False))
    sched = FlowMatchEulerDiscreteScheduler.from_config(
        config if dynamic else {**config, "shift": shift, "use_dynamic_shifting": False}
    )
    mu = None
    if dynamic:
        mu = calculate_shift(
            image_seq_len,
            config.get("base_image_seq_len", 256),
            config.get("max_image_seq_len", 4096),
            config.get("base_shift", 0.5),
            config.get("max_shift", 1.15),
        )
    sched.set_timesteps(sigmas=np.linspace(1.0, 1 / num_steps, num_steps), mu=mu)
    return sched.sigmas.to(torch.float64)


def unipc_flow_sigmas(num_steps: int, shift: float, config: dict) -> torch.Tensor:
    """``UniPCMultistepScheduler`` flow sigmas with ``flow_shift = shift``. UniPC lowers a first sigma of 1 by 1e-6
    only to keep its multistep ``log(alpha)`` finite; that guard is undone here so the first step is exactly the
    pure-noise level."""
    from diffusers import UniPCMultistepScheduler

    if not config.get("use_flow_sigmas", False):
        raise ValueError("a UniPC scheduler without use_flow_sigmas is not a flow-matching schedule")
    sched = UniPCMultistepScheduler.from_config({**config, "flow_shift": shift, "use_dynamic_shifting": False})
    sched.set_timesteps(num_steps)
    sigmas = sched.sigmas.to(torch.float64)
    if abs(float(sigmas[0]) - 1.0) < 1e-5:
        sigmas[0] = 1.0
    return sigmas


def calculate_shift(
    image_seq_len: int,
    base_seq_len: int = 256,
    max_seq_len: int = 4096,
    base_shift: float = 0.5,
    max_shift: float = 1.15,
) -> float:
    """FLUX / Qwen-Image resolution-dependent shift ``mu`` (linear in the image token count), as in diffusers."""
    m = (max_shift - base_shift) / (max_seq_len - base_seq_len)
    return image_seq_len * m + (base_shift - m * base_seq_len)
