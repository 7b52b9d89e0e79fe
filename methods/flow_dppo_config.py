"""Config of method=flow_dppo: Flow-DPPO (arXiv:2606.11025) on Flow-GRPO's sampler and updates, the SD3.5-M recipe of
the authors' code.

Source of every default: Tencent-Hunyuan/UniRL @1a7b501e8fe8517b432a130220d2ff462f9b5afa (the files are unchanged
since the initial release a1f8596), ``examples/diffusion/sd3_flowdppo.yaml`` (the recipe) and
``unirl/algorithms/flowdppo.py`` (``FlowDPPOConfig``, ``FlowDPPO``); the SDE steps: ``unirl/utils/scheduler_utils.py``
(``AllSDEScheduler``). Keys not set there are Flow-GRPO's (methods/flow_grpo_config.py). docs/methods/flow_dppo.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from methods.flow_grpo_config import FlowGRPOConfig
from methods.trained_steps import flow_trained
from rewardflow.errors import ConfigErrors


class KLStd(StrEnum):
    """The ``sigma_t`` the KL of the mask divides by (docs/methods/flow_dppo.md#choices-the-paper-and-the-code-leave-open)."""

    step = "step"  # the SDE step's own std g sqrt(-Delta): the exact Gaussian KL (verl-omni's std_dev_t x sqrt_dt)
    unirl = "unirl"  # UniRL's _compute_sigma_t: eta sqrt(sigma / (1 - min(sigma, 0.99))) sqrt(-Delta), any kernel
    none = "none"  # add_kl_coefficient=false: mean_D (mu_theta - mu_old)^2 / 2


class Anchor(StrEnum):
    """Where the old policy's means or log-probs come from."""

    rollout = "rollout"  # kept while sampling (no extra pass)
    replay = "replay"  # a forward without gradients of every trained row at the pre-update weights, before the updates


@dataclass
class FlowDPPOConfig(FlowGRPOConfig):
    _target_: str = "methods.flow_dppo.FlowDPPO"
    name: str = "flow_dppo"
    group_size: int = 16  # sampling.samples_per_prompt: 16
    prompts_per_step: int = 48  # batch_size: 48 (prompts_per_rollout)
    sampling_steps: int = 10  # sampling.num_inference_steps: 10
    updates_per_rollout: int = 2  # stack.num_updates_per_batch: 2 (disjoint mini-batches, one optimizer step each)
    eta: float = 0.7  # sampling.eta: 0.7 (FlowSDEStrategy: std_dev_t = eta sqrt(sigma / (1 - sigma)))
    kl_beta: float = 0.0  # FlowDPPO.compute_loss_and_backward has no KL to a reference policy
    # the mask's threshold tau on the mean-reduced per-step KL (paper Eq. 18): algorithm.kl_mask_threshold: 1.0e-5
    kl_mask_threshold: float = 1e-5
    # algorithm.add_kl_coefficient: true divides by sigma_t^2 (KLStd.step or .unirl), false is KLStd.none
    kl_std: KLStd = KLStd.step
    # the old means: UniRL's FlowDPPO.prepare_segment always replays them at the pre-update weights ("train-time
    # geometry"); rollout keeps the sampler's, saving T forwards per sample (equal in exact arithmetic)
    old_means: Anchor = Anchor.replay
    # the old log-probs: FlowDPPOConfig.old_logp_source = "rollout" (the rollout's); replay as verl-omni's recompute
    old_log_probs: Anchor = Anchor.rollout
    # SDE (= trained) steps per rollout: sampling.scheduler (AllSDEScheduler) num_sde_steps: 3, drawn without
    # replacement from [floor(N lo), floor(N hi)) by numpy's default_rng(training iteration); ODE elsewhere.
    # 0: every step is an SDE step and steps 0 .. floor(timestep_fraction N) - 1 are trained (Flow-GRPO)
    sde_steps: int = 3
    sde_range: list[float] = field(default_factory=lambda: [0.0, 0.5])  # timestep_fraction: [0.0, 0.5]

    @classmethod
    def check(cls, cfg: Any, errors: ConfigErrors) -> None:
        super().check(cfg, errors)
        m = cfg.method
        errors.require(
            m.kl_mask_threshold > 0,
            "method.kl_mask_threshold",
            f"must be > 0 (got {m.kl_mask_threshold}); the authors' recipe uses 1e-5",
        )
        errors.require(m.sde_steps >= 0, "method.sde_steps", f"must be >= 0 (got {m.sde_steps}); 0 = every step")
        if m.sde_steps <= 0:
            return
        if not errors.require(len(m.sde_range) == 2, "method.sde_range", f"must be [lo, hi] (got {list(m.sde_range)})"):
            return
        lo, hi = (float(v) for v in m.sde_range)
        first, stop = sde_pool(m.sampling_steps, m.sde_range)
        errors.require(
            0.0 <= lo <= hi <= 1.0 and stop <= m.sampling_steps - 1 and stop - first >= m.sde_steps,
            "method.sde_range",
            f"{[lo, hi]} gives steps [{first}, {stop}) of sampling_steps={m.sampling_steps}: need 0 <= lo <= hi <= 1, "
            f"at least sde_steps={m.sde_steps} steps, and not the last step {m.sampling_steps - 1} (never trained). "
            f"Fix: e.g. method.sde_range=[0.0,0.5] with method.sde_steps<={m.sampling_steps // 2}",
        )


def sde_pool(sampling_steps: int, sde_range: Any) -> tuple[int, int]:
    """The steps ``[first, stop)`` the SDE steps are drawn from: ``floor(N lo)`` and ``floor(N hi)``
    (``AllSDEScheduler._effective_start`` / ``_effective_end``)."""
    n = int(sampling_steps)
    return int(n * float(sde_range[0])), int(n * float(sde_range[1]))


def dppo_trained(m: Any) -> int:
    """T, the trained (= SDE) steps per sample: ``sde_steps``, or Flow-GRPO's ``floor(timestep_fraction N)`` at 0."""
    return int(m.sde_steps) or flow_trained(m.timestep_fraction, m.sampling_steps)


SCHEMAS = {"method": {"flow_dppo": FlowDPPOConfig}}
