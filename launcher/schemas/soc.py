"""Schemas of the stochastic-optimal-control methods (method=adjoint_matching|eam; spec eam.md §B–D).

Keys marked [R] are reconstructed or recommended where the papers could not be read (spec §0, §G); they are flags,
and the README's EAM/AM section says which.
"""
from __future__ import annotations

from dataclasses import dataclass

from omegaconf import MISSING


@dataclass
class SOCConfig:
    """Knobs shared by Adjoint Matching and EAM."""

    _target_: str = MISSING
    name: str = MISSING
    group_size: int = 1               # samples per prompt (no group statistics: B = prompts_per_step x group_size)
    prompts_per_step: int = 40        # prompts per iteration (global)
    sampling_steps: int = 40          # K: AM's SDE rollout steps; EAM's grid for time_sampling=am_grid
    reward_scale: float = 1.0e5       # lambda: target p_pre exp(lambda r); sweep per reward
    sigma_offset: float = 0.025       # h in sigma(t) = sqrt(2 (1 - t + h) / (t + h)), kappa = 1 / (t + h) (AM: 1/40)
    loss_clip: float = 0.0            # per-sample loss clipped at loss_clip x lambda^2 (AM's LCT: 1.6); 0 = off
    loss_reduction: str = "sum"       # sum | mean of the squared residual over latent elements
    updates_per_rollout: int = 1      # optimizer steps per iteration
    micro_batch: int = 1              # samples per pass with gradients (VJPs, loss)
    rollout_chunk: int = 32           # rows per transformer call without gradients (CFG rows counted; docs/memory.md)
    decode_chunk: int = 8             # images per VAE decode and per reward call
    trajectory_offload: bool = False  # AM: keep the stored states in pinned host memory, not on the GPU


@dataclass
class AdjointMatchingConfig(SOCConfig):
    _target_: str = "methods.adjoint_matching.AdjointMatching"
    name: str = "adjoint_matching"
    loss_last_steps: int = 10         # the last steps of the K-step grid enter the loss ...
    loss_random_steps: int = 10       # ... plus this many random earlier steps per sample (AM App. G.2)
    denoise_last_step: bool = True    # reward at X_{K-1} + h v_pre(X_{K-1}) instead of the noisy X_K (AM App. G.1)
    loss_clip: float = 1.6            # AM App. G.3: LCT = 1.6 lambda^2


@dataclass
class EAMConfig(SOCConfig):
    _target_: str = "methods.eam.EAM"
    name: str = "eam"
    prompts_per_step: int = 32
    c: float = 1.0                    # [R] base terminal law N(0, c^2 I) (linear memoryless base D_c)
    endpoint_nfe: int = 10            # Euler ODE steps of the endpoint X_1
    endpoint_schedule: str = "scheduler"   # linear_shift | scheduler (the family's diffusers sigmas)
    endpoint_shift: float = 3.0       # time shift of the endpoint grid (SD3.5: 3)
    terminal_score: str = "tweedie_shrink"   # [R] tweedie_shrink | tweedie_naive (biased) | anchor (Option B, biased)
    delta: float = 0.02               # [R] t' = 1 - delta of the Tweedie terminal score
    loss_timesteps: int = 4           # [R] K_t loss times per sample (4 fast, 20 AM parity)
    time_sampling: str = "uniform"    # [R] uniform | stratified on [t_min, 1 - t_min] | am_grid (AM parity)
    t_min: float = 0.025              # [R] loss times avoid [0, t_min) and (1 - t_min, 1]
    loss_weight: str = "memoryless"   # [R] memoryless: 4 / sigma(t)^2 (AM-equivalent) | none


SCHEMAS = {"method": {"adjoint_matching": AdjointMatchingConfig, "eam": EAMConfig}}
