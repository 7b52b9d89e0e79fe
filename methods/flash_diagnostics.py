"""Per-step diagnostics of Flash-GRPO, logged through ``Method.step_metrics`` (docs/methods/flash_grpo.md#metrics).

* ``flash/kstar_<k>``: how many of this rank's rollouts had their SDE step at k (one metric per pool index, zeros
  included, so the W&B panels form a histogram over steps); ``flash/kstar_mean``.
* ``flash/lambda_{min,mean,max}``: lambda(t_k*) over the step's rollouts; ``flash/weight_{min,max}`` and
  ``flash/weight_denom``: the normalised weights and the mean 1/lambda they were divided by (mean over updates).
* ``flash/pre_update_clip_frac`` and ``flash/pre_update_ratio_dev_max``: clip fraction and max |ratio - 1| of the
  first update's samples, evaluated before any optimizer step of the rollout, i.e. pure rollout-vs-replay numerical
  drift (the 1e-3 clip range is tight; a fraction above ~0.05 means training on numerical noise;
  docs/methods/flash_grpo.md#advantages-and-loss).
* ``flash/kl_ref_<k>``: mean KL to the reference per SDE step (when ``kl_beta`` > 0): its gradient scales as
  lambda^2 (docs/methods/flash_grpo.md#advantages-and-loss).
"""
from __future__ import annotations

import logging

import torch

log = logging.getLogger(__name__)


class FlashDiagnostics:
    """Accumulates the step's statistics; :meth:`flush` returns the metrics and starts the next step.

    Args:
        pool: the candidate SDE step indices (one histogram bin each).
        clip_range: PPO epsilon (a pre-update sample counts as clipped when |ratio - 1| > epsilon).
        warn_above: log a warning (once per run) when the pre-update clip fraction exceeds this.
    """

    def __init__(self, pool: list[int], clip_range: float, warn_above: float):
        self.pool, self.clip_range, self.warn_above = list(pool), clip_range, warn_above
        self._warned = False
        self._reset()

    def _reset(self) -> None:
        self.kstar: list[torch.Tensor] = []
        self.inv_lambda: list[torch.Tensor] = []
        self.weights: list[torch.Tensor] = []
        self.denoms: list[float] = []
        self.pre_n, self.pre_clipped, self.pre_dev_max = 0, 0.0, 0.0
        self.kl_sum: dict[int, float] = {}
        self.kl_n: dict[int, int] = {}

    def on_rollout(self, kstar: torch.Tensor, inv_lambda: torch.Tensor) -> None:
        self.kstar.append(kstar.detach().cpu())
        self.inv_lambda.append(inv_lambda.detach().cpu())

    def on_weights(self, weights: torch.Tensor, denom: float) -> None:
        self.weights.append(weights.detach().cpu())
        self.denoms.append(denom)

    def on_loss(self, pre_update: torch.Tensor, index: torch.Tensor, stats: dict[str, torch.Tensor]) -> None:
        pre = pre_update.to(stats["ratio"].device)
        if bool(pre.any()):
            dev = (stats["ratio"][pre] - 1.0).abs()
            self.pre_n += int(pre.sum())
            self.pre_clipped += float((dev > self.clip_range).sum())
            self.pre_dev_max = max(self.pre_dev_max, float(dev.max()))
        if "kl" in stats:
            for k, kl in zip(index.tolist(), stats["kl"].tolist()):
                self.kl_sum[k] = self.kl_sum.get(k, 0.0) + kl
                self.kl_n[k] = self.kl_n.get(k, 0) + 1

    def flush(self) -> dict[str, float]:
        out: dict[str, float] = {}
        if self.kstar:
            k = torch.cat(self.kstar)
            out.update({f"flash/kstar_{i:02d}": int((k == i).sum()) for i in self.pool})
            out["flash/kstar_mean"] = float(k.double().mean())
            lam = 1.0 / torch.cat(self.inv_lambda)
            out.update({"flash/lambda_min": float(lam.min()), "flash/lambda_mean": float(lam.mean()),
                        "flash/lambda_max": float(lam.max())})
        if self.weights:
            w = torch.cat(self.weights)
            out.update({"flash/weight_min": float(w.min()), "flash/weight_max": float(w.max()),
                        "flash/weight_denom": sum(self.denoms) / len(self.denoms)})
        if self.pre_n:
            frac = self.pre_clipped / self.pre_n
            out.update({"flash/pre_update_clip_frac": frac, "flash/pre_update_ratio_dev_max": self.pre_dev_max})
            if frac > self.warn_above and not self._warned:
                self._warned = True
                log.warning("flash_grpo: %.1f%% of samples are clipped before any update (max |ratio - 1| = %.2e, "
                            "clip_range %.0e): rollout and replay numerics differ (dtype, attention backend, CFG, "
                            "compile). Fix: make them identical, or raise method.clip_range (e.g. 1e-2); see "
                            "docs/methods/flash_grpo.md#advantages-and-loss",
                            100 * frac, self.pre_dev_max, self.clip_range)
        out.update({f"flash/kl_ref_{k:02d}": self.kl_sum[k] / self.kl_n[k] for k in sorted(self.kl_sum)})
        self._reset()
        return out
