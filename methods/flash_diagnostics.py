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
        self.denoms: list[torch.Tensor] = []
        # device tensors filled inside the update and read back once, by flush (no host sync per micro-batch)
        self.pre_n = self.pre_clipped = self.pre_dev_max = None
        self.kl_sum = self.kl_n = None

    def on_rollout(self, kstar: torch.Tensor, inv_lambda: torch.Tensor) -> None:
        self.kstar.append(kstar.detach().cpu())
        self.inv_lambda.append(inv_lambda.detach().cpu())

    def on_weights(self, weights: torch.Tensor, denom: torch.Tensor) -> None:
        self.weights.append(weights.detach())
        self.denoms.append(torch.as_tensor(denom).detach())

    def on_loss(self, pre_update: torch.Tensor, index: torch.Tensor, stats: dict[str, torch.Tensor]) -> None:
        ratio = stats["ratio"].detach()
        pre = pre_update  # on the rollout's device, as the ratio
        dev = (ratio - 1.0).abs()
        n, clipped = pre.sum(), ((dev > self.clip_range) & pre).sum()
        dev_max = torch.where(pre, dev, torch.zeros_like(dev)).max()
        if self.pre_n is None:
            self.pre_n, self.pre_clipped, self.pre_dev_max = n, clipped, dev_max
        else:
            self.pre_n, self.pre_clipped = self.pre_n + n, self.pre_clipped + clipped
            self.pre_dev_max = torch.maximum(self.pre_dev_max, dev_max)
        if "kl" in stats:
            pool = torch.tensor(self.pool, device=index.device)
            hits = (index[:, None] == pool[None, :]).to(torch.float64)  # (rows, pool)
            kl_sum, kl_n = (hits * stats["kl"].detach().to(torch.float64)[:, None]).sum(0), hits.sum(0)
            self.kl_sum = kl_sum if self.kl_sum is None else self.kl_sum + kl_sum
            self.kl_n = kl_n if self.kl_n is None else self.kl_n + kl_n

    def flush(self) -> dict[str, float]:
        out: dict[str, float] = {}
        if self.kstar:
            k = torch.cat(self.kstar)
            out.update({f"flash/kstar_{i:02d}": int((k == i).sum()) for i in self.pool})
            out["flash/kstar_mean"] = float(k.double().mean())
            lam = 1.0 / torch.cat(self.inv_lambda)
            out.update(
                {
                    "flash/lambda_min": float(lam.min()),
                    "flash/lambda_mean": float(lam.mean()),
                    "flash/lambda_max": float(lam.max()),
                }
            )
        if self.weights:
            w = torch.cat(self.weights)
            out.update(
                {
                    "flash/weight_min": float(w.min()),
                    "flash/weight_max": float(w.max()),
                    "flash/weight_denom": float(torch.stack(self.denoms).double().mean()),
                }
            )
        if self.pre_n is not None and int(self.pre_n):
            frac = float(self.pre_clipped) / int(self.pre_n)
            out.update({"flash/pre_update_clip_frac": frac, "flash/pre_update_ratio_dev_max": float(self.pre_dev_max)})
            if frac > self.warn_above and not self._warned:
                self._warned = True
                log.warning(
                    "flash_grpo: %.1f%% of samples are clipped before any update (max |ratio - 1| = %.2e, "
                    "clip_range %.0e): rollout and replay numerics differ (dtype, attention backend, CFG, "
                    "compile). Fix: make them identical, or raise method.clip_range (e.g. 1e-2); see "
                    "docs/methods/flash_grpo.md#advantages-and-loss",
                    100 * frac,
                    self.pre_dev_max,
                    self.clip_range,
                )
        if self.kl_sum is not None:
            for k, total, n in zip(self.pool, self.kl_sum.tolist(), self.kl_n.tolist()):
                if n:
                    out[f"flash/kl_ref_{k:02d}"] = total / n
        self._reset()
        return out
