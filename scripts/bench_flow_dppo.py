"""Update time of Flow-DPPO against Flow-GRPO, side by side in one process (docs/methods/flow_dppo.md#bench).

Trainers (the real loop of launcher/train/trainer.py) over the same tiny FLUX twin take turns step by step (the order
rotates every round), all with the recipe's 10 sampling steps and the same ``method.update_batch``:

* ``flow_grpo`` without KL (Flow-GRPO's 9 trained steps), the baseline;
* ``flow_dppo`` with Flow-GRPO's sampler (``sde_steps=0``, the same 9 trained steps): the old means replayed (the
  authors', one more forward per trained row), and kept from the rollout (no extra pass);
* ``flow_dppo`` as its recipe (3 SDE steps drawn from the first half, replayed).

Printed per variant: the median over rounds of its update time / Flow-GRPO's (``time/update_s``: advantages, the
replay, the backward calls, the optimizer steps), next to the ideal ratio of the update's transformer passes with a
backward counted as two forwards, and the counted passes. The last line is one JSON object.

    .venv/bin/python scripts/bench_flow_dppo.py --quick     # 3 rounds
    .venv/bin/python scripts/bench_flow_dppo.py --rounds 8
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_SILENT", "true")

from launcher.config import compose  # noqa: E402
from launcher.train.trainer import RunInfo, Trainer  # noqa: E402

STEPS = 10  # the recipe's sampling steps
VARIANTS = {
    "flow_grpo": ("flow_grpo", ["method.kl_beta=0"]),
    "dppo_replay": ("flow_dppo", ["method.sde_steps=0"]),
    "dppo_rollout": ("flow_dppo", ["method.sde_steps=0", "method.old_means=rollout"]),
    "dppo_recipe": ("flow_dppo", []),
}


def trainer(method: str, extra: list[str], update_batch: int, run_dir: Path) -> Trainer:
    cfg = compose(
        [
            "experiment=smoke",
            "logger=none",
            f"method={method}",
            f"method.sampling_steps={STEPS}",
            f"method.update_batch={update_batch}",
            "trainer.steps=1000",
            *extra,
        ]
    )
    return Trainer(cfg, RunInfo(run_dir=run_dir))


def update_cost(t: Trainer) -> float:
    """The update's transformer passes per sample, a backward counted as two forwards (the rollout's N excluded)."""
    fwd, bwd = type(t.method).passes_per_sample(t.method.cfg)
    return (fwd - STEPS) + 2 * bwd


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--quick", action="store_true", help="3 rounds")
    p.add_argument("--update-batch", type=int, default=4)
    args = p.parse_args()
    rounds = 3 if args.quick else args.rounds
    import torch

    torch.set_num_threads(1)
    ratios: dict[str, list[float]] = {k: [] for k in VARIANTS if k != "flow_grpo"}
    with tempfile.TemporaryDirectory() as tmp:
        trainers = {k: trainer(m, extra, args.update_batch, Path(tmp) / k) for k, (m, extra) in VARIANTS.items()}
        for t in trainers.values():  # warm-up
            t.train_step(0)
        names, rows = list(trainers), {}
        for r in range(1, rounds + 1):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                rows[name] = trainers[name].train_step(r)
            for k in ratios:
                ratios[k].append(rows[k]["time/update_s"] / rows["flow_grpo"]["time/update_s"])
        ideal = {k: update_cost(trainers[k]) / update_cost(trainers["flow_grpo"]) for k in ratios}
        passes = {k: type(t.method).passes_per_sample(t.method.cfg) for k, t in trainers.items()}
    out = {"rounds": rounds, "update_batch": args.update_batch, "passes_per_sample": passes}
    for k in ratios:
        measured = statistics.median(ratios[k])
        print(
            f"{k:>13} / flow_grpo update time: measured {measured:.3f}, ideal {ideal[k]:.3f} "
            f"(off by {100 * (measured / ideal[k] - 1):+.1f} %), passes per sample {passes[k]} "
            f"vs {passes['flow_grpo']}, rounds {[round(x, 3) for x in ratios[k]]}"
        )
        out[k] = {"update_time_ratio": measured, "ideal": ideal[k]}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
