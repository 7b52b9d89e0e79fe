"""Update time of MixGRPO against DanceGRPO at the paper's window, side by side in one process.

Two trainers (the real loop of launcher/train/trainer.py) over the same tiny FLUX twin take turns step by step (the
order alternates every round), both with 25 sampling steps (the paper's FLUX setting): ``method=mix_grpo`` with its
default window of 4 SDE steps, and ``method=dance_grpo`` with timestep_fraction 0.6 (floor(0.6 x 24) = 14 trained
steps, the reference's ``training_strategy=all``). Both at the same ``method.update_batch``.

Printed: the median over rounds of the update-time ratio MixGRPO / DanceGRPO (per round, the two updates ran back to
back), next to the ideal ratio trained steps / DanceGRPO's trained steps (4 / 14 = 0.286: the update's transformer
forward + backward rows per sample), and the counted backward rows. The last line is one JSON object.

    .venv/bin/python scripts/bench_mixgrpo.py --quick     # 3 rounds: ~1 CPU-min
    .venv/bin/python scripts/bench_mixgrpo.py --rounds 8
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

STEPS = 25  # the paper's FLUX sampling steps


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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--quick", action="store_true", help="3 rounds")
    p.add_argument("--update-batch", type=int, default=4)
    args = p.parse_args()
    rounds = 3 if args.quick else args.rounds
    import torch

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        mix = trainer("mix_grpo", [], args.update_batch, Path(tmp) / "mix")
        dance = trainer("dance_grpo", ["method.timestep_fraction=0.6"], args.update_batch, Path(tmp) / "dance")
        trained = (
            type(mix.method).trained_per_sample(mix.method.cfg),
            type(dance.method).trained_per_sample(dance.method.cfg),
        )
        for t in (mix, dance):  # warm-up
            t.train_step(0)
        ratios, rows = [], {}
        for r in range(1, rounds + 1):
            order = [("mix", mix), ("dance", dance)] if r % 2 else [("dance", dance), ("mix", mix)]
            for name, t in order:
                rows[name] = t.train_step(r)
            ratios.append(rows["mix"]["time/update_s"] / rows["dance"]["time/update_s"])
    ideal = trained[0] / trained[1]
    measured = statistics.median(ratios)
    bwd = rows["mix"]["count/transformer_bwd"] / rows["dance"]["count/transformer_bwd"]
    print(f"trained steps per sample: mix_grpo {trained[0]}, dance_grpo {trained[1]} ({STEPS} sampling steps)")
    print(f"update time ratio mix/dance: measured {measured:.3f} (rounds {[round(x, 3) for x in ratios]})")
    print(f"                             ideal    {ideal:.3f}  (off by {100 * (measured / ideal - 1):+.1f} %)")
    print(f"backward rows ratio (counted): {bwd:.3f}")
    print(
        json.dumps(
            {
                "update_time_ratio": measured,
                "ideal_update_time_ratio": ideal,
                "bwd_count_ratio": bwd,
                "rounds": rounds,
                "update_batch": args.update_batch,
            }
        )
    )


if __name__ == "__main__":
    main()
