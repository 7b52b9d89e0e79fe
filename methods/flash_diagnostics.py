"""Per-step diagnostics of Flash-GRPO, logged through ``Method.step_metrics`` (docs/methods/flash_grpo.md#metrics).

* ``flash/kstar_<k>``: how many of this rank's rollouts had their SDE step at k (one metric per pool index, zeros
  included, so the W&B panels form a histogram over steps); ``flash/kstar_mean``.
* ``flash/lambda_{min,mean,max}``: lambda(t_k*) over the step's rollouts; ``flash/weight_{min,max}`` and
  ``flash/weight_denom``: the normalised weights and the mean 1/lambda they were divided by (mean over updates).
* ``flash/pre_update_clip_frac`` and ``flash/pre_update_ratio_dev_max``: the GRPO methods' first-update drift
  (:mod:`methods.first_update_ratios`) under Flash-GRPO's names, added by ``FlashGRPO.step_metrics`` (the 1e-3
  clip range is tight; a fraction above ~0.05 means training on numerical noise;
  docs/methods/flash_grpo.md#advantages-and-loss).
* ``flash/kl_ref_<k>``: mean KL to the reference per SDE step (when ``kl_beta`` > 0): its gradient scales as
  lambda^2 (docs/methods/flash_grpo.md#advantages-and-loss).
"""

from __future__ import annotations

import torch


class FlashDiagnostics:
    """Accumulates the step's statistics; :meth:`flush` returns the metrics and starts the next step.

    Args:
        pool: the candidate SDE step indices (one histogram bin each).
    """

    def __init__(self, pool: list[int]):
        self.pool = list(pool)
        self._reset()

    def _reset(self) -> None:
        self.kstar: list[torch.Tensor] = []
        self.inv_lambda: list[torch.Tensor] = []
        self.weights: list[torch.Tensor] = []
        self.denoms: list[torch.Tensor] = []
        # device tensors filled inside the update and read back once, by flush (no host sync per micro-batch)
        self.kl_sum = self.kl_n = None

    def on_rollout(self, kstar: torch.Tensor, inv_lambda: torch.Tensor) -> None:
        self.kstar.append(kstar.detach().cpu())
        self.inv_lambda.append(inv_lambda.detach().cpu())

    def on_weights(self, weights: torch.Tensor, denom: torch.Tensor) -> None:
        self.weights.append(weights.detach())
        self.denoms.append(torch.as_tensor(denom).detach())

    def on_loss(self, index: torch.Tensor, stats: dict[str, torch.Tensor]) -> None:
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
        if self.kl_sum is not None:
            for k, total, n in zip(self.pool, self.kl_sum.tolist(), self.kl_n.tolist()):
                if n:
                    out[f"flash/kl_ref_{k:02d}"] = total / n
        self._reset()
        return out
