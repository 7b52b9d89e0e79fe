"""Deterministic rollouts with diffusers' own flow-matching ODE solvers, on a given sigma grid.

Forward-process methods (DiffusionNFT) do not need a likelihood of the sampling chain, so any black-box solver can
draw their samples. ``method.sampler`` picks one of diffusers' schedulers:

* ``euler``: ``FlowMatchEulerDiscreteScheduler`` (first order; on rectified flows DDIM with eta = 0 and
  DPM-Solver++(1) are the same step);
* ``dpmpp_2m``: ``DPMSolverMultistepScheduler`` with ``algorithm_type="dpmsolver++"``, ``solver_order=2``,
  ``lower_order_final=True``, ``final_sigmas_type="zero"`` and flow prediction: the ``dpm2`` solver of DiffusionNFT's
  ``flow_grpo/diffusers_patch/solver.py`` (their ``dpm_step``, lines 207-260, is this scheduler's step written out,
  first and last steps first order; tests/test_diffusion_nft_math.py checks the two agree);
* ``unipc``: ``UniPCMultistepScheduler`` (bh2, order 2, corrector on) with flow prediction.

Every solver steps on exactly the grid it is given (the family's sigma grid, ``methods.schedule``), so the rollout
grid does not depend on the solver. ``FlowMatchEulerDiscreteScheduler`` takes the grid through
``set_timesteps(sigmas=...)``; the two multistep schedulers build their own flow grid in ``set_timesteps``
(diffusers 0.42 lets neither take an arbitrary one), so their ``sigmas`` are replaced by the given grid after
``set_timesteps`` and stepping starts at index 0 (``set_begin_index``).
"""

from __future__ import annotations

from typing import Callable

import torch

from methods.diffusion_nft_config import Sampler


def make_solver(name: str, sigmas: torch.Tensor):
    """A fresh diffusers scheduler that steps over ``sigmas`` (N + 1 values from 1 down to 0, the last one 0)."""
    if name not in tuple(Sampler):
        raise ValueError(f"unknown sampler {name!r}; expected one of {', '.join(Sampler)}")
    grid = sigmas.detach().to("cpu", torch.float64)
    n = grid.numel() - 1
    if name == "euler":
        from diffusers import FlowMatchEulerDiscreteScheduler

        solver = FlowMatchEulerDiscreteScheduler(shift=1.0, use_dynamic_shifting=False)  # shift 1: grid as given
        solver.set_timesteps(sigmas=grid[:-1].numpy())
    else:
        from diffusers import DPMSolverMultistepScheduler, UniPCMultistepScheduler

        flow = dict(
            prediction_type="flow_prediction",
            use_flow_sigmas=True,
            flow_shift=1.0,
            solver_order=2,
            lower_order_final=True,
            final_sigmas_type="zero",
        )
        solver = (
            DPMSolverMultistepScheduler(algorithm_type="dpmsolver++", **flow)
            if name == "dpmpp_2m"
            else UniPCMultistepScheduler(**flow)
        )
        solver.set_timesteps(n)
        solver.sigmas = grid.to(torch.float32)
        solver.timesteps = grid[:-1].to(torch.float32) * 1000.0
    solver.set_begin_index(0)
    if float(grid[-1]) != 0.0 or solver.sigmas.numel() != n + 1:
        raise ValueError(f"the sampler grid must hold N + 1 sigmas ending at 0 (got {grid.tolist()})")
    return solver


def solve(
    name: str, sigmas: torch.Tensor, velocity: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], x: torch.Tensor
) -> torch.Tensor:
    """Integrate ``dx/dsigma = velocity(x, sigma)`` from ``sigmas[0]`` to 0 with sampler ``name``; returns the final
    latents only. ``velocity`` receives the grid's sigma per sample, (B,) float64, never the solver's float32 copy."""
    solver = make_solver(name, sigmas)
    grid = sigmas.detach().to(x.device, torch.float64)  # once: a per-call move would be a sync on CUDA
    for i, t in enumerate(solver.timesteps):
        v = velocity(x, grid[i].expand(x.shape[0]))
        x = solver.step(v, t, x, return_dict=False)[0]
    return x
