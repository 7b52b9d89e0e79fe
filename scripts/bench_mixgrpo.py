"""Update time of MixGRPO against DanceGRPO at the paper's window, and MixGRPO-Flash's rollout against MixGRPO's,
side by side in one process.

Three trainers (the real loop of launcher/train/trainer.py) over the same FLUX-class model (``--config``, default the
benches' FLUX "small" at 64x64, docs/development.md#the-flux-small-configuration; ``tiny`` is the twin) take turns step by step (the
order rotates every round), all with 25 sampling steps (the paper's FLUX setting): ``method=mix_grpo`` with its
default window of 4 SDE steps, ``method=mix_grpo_flash`` (the same window, DPM-Solver++ on a grid compressed to 0.4
after it), and ``method=dance_grpo`` with timestep_fraction 0.6 (floor(0.6 x 24) = 14 trained steps, the reference's
``training_strategy=all``). All at the same ``method.update_batch``.

Printed: the median over rounds of the update-time ratio MixGRPO / DanceGRPO (per round, the updates ran back to
back), next to the ideal ratio trained steps / DanceGRPO's trained steps (4 / 14 = 0.286: the update's transformer
forward + backward rows per sample), and the counted backward rows; then the Flash row: the rollout-time ratio
MixGRPO-Flash / MixGRPO next to the ideal ratio of their rollouts' transformer evaluations (11 / 25 = 0.44 for the
first window), and the step-time ratios of both against DanceGRPO (measured only). The last line is one JSON object.

Time is the process's CPU time by default (``--clock cpu``: with one torch thread, the work done, which other jobs
on a shared machine do not inflate; as scripts/bench_jagg.py), or the trainer's wall-clock timers (``--clock wall``).

    .venv/bin/python scripts/bench_mixgrpo.py --quick     # 3 rounds
    .venv/bin/python scripts/bench_mixgrpo.py --rounds 8
    .venv/bin/python scripts/bench_mixgrpo.py --config tiny  # the tiny twin: the update's fixed costs weigh more
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_SILENT", "true")

from flux_bench_models import CONFIGS, model_folder  # noqa: E402
from launcher.config import compose  # noqa: E402
from launcher.train.trainer import RunInfo, Trainer  # noqa: E402
from methods.mix_grpo_window import rollout_steps  # noqa: E402

STEPS = 25  # the paper's FLUX sampling steps


def trainer(method: str, extra: list[str], model: list[str], update_batch: int, run_dir: Path) -> Trainer:
    cfg = compose(
        [
            "experiment=smoke",
            "logger=none",
            *model,
            f"method={method}",
            f"method.sampling_steps={STEPS}",
            f"method.update_batch={update_batch}",
            "trainer.steps=1000",
            "trainer.threads=1",  # the trainer sets torch's threads (0 = every core): one, for the CPU clock
            *extra,
        ]
    )
    return Trainer(cfg, RunInfo(run_dir=run_dir))


class CPUClock:
    """CPU seconds of this process in a trainer's rollout and update phases of the last step (the method's hooks and
    the optimizer step)."""

    def __init__(self, trainer: Trainer):
        self.seconds = {"rollout": 0.0, "update": 0.0, "step": 0.0}
        method = trainer.method
        hooks = [(method, "rollout", "rollout")]
        hooks += [(method, n, "update") for n in ("prepare_update", "update_plan", "backward")]
        for owner, name, phase in [*hooks, (trainer.optimizer, "step", "update")]:
            setattr(owner, name, self._timed(getattr(owner, name), phase))
        self.train_step = self._timed(trainer.train_step, "step")
        self.row: dict[str, float] = {}

    def _timed(self, fn, phase):
        def wrapper(*args, **kwargs):
            t0 = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[phase] += time.process_time() - t0

        return wrapper

    def step(self, r: int, clock: str) -> dict[str, float]:
        """One training step: ``{rollout, update, step}`` seconds on ``clock``."""
        self.seconds = dict.fromkeys(self.seconds, 0.0)
        row = self.row = self.train_step(r)
        if clock == "cpu":
            return dict(self.seconds)
        return {k: row[f"time/{k}_s"] for k in self.seconds}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--quick", action="store_true", help="3 rounds")
    p.add_argument("--update-batch", type=int, default=4)
    p.add_argument("--config", choices=sorted(CONFIGS), default="small", help="the FLUX-class transformer")
    p.add_argument("--size", type=int, default=64, help="image side in pixels (64 -> 256 image tokens)")
    p.add_argument("--clock", choices=["cpu", "wall"], default="cpu", help="CPU time (default) or wall-clock")
    args = p.parse_args()
    rounds = 3 if args.quick else args.rounds
    import torch

    torch.set_num_threads(1)
    model = [
        "model=tiny_flux",
        f"model.path={model_folder(args.config)}",
        f"model.height={args.size}",
        f"model.width={args.size}",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        runs = {
            "mix": trainer("mix_grpo", [], model, args.update_batch, Path(tmp) / "mix"),
            "flash": trainer("mix_grpo_flash", [], model, args.update_batch, Path(tmp) / "flash"),
            "dance": trainer(
                "dance_grpo", ["method.timestep_fraction=0.6"], model, args.update_batch, Path(tmp) / "dance"
            ),
        }
        mix, flash, dance = runs["mix"], runs["flash"], runs["dance"]
        trained = (
            type(mix.method).trained_per_sample(mix.method.cfg),
            type(dance.method).trained_per_sample(dance.method.cfg),
        )
        rollout_fwd = (rollout_steps(flash.method.cfg, 0), rollout_steps(mix.method.cfg, 0))
        clocks = {name: CPUClock(t) for name, t in runs.items()}
        for c in clocks.values():  # warm-up
            c.step(0, args.clock)
        ratios, rollout_ratios, step_ratios, rows = [], [], {"mix": [], "flash": []}, {}
        names = list(runs)
        for r in range(1, rounds + 1):
            for name in names[r % 3 :] + names[: r % 3]:
                rows[name] = clocks[name].step(r, args.clock)
            ratios.append(rows["mix"]["update"] / rows["dance"]["update"])
            rollout_ratios.append(rows["flash"]["rollout"] / rows["mix"]["rollout"])
            for name in step_ratios:
                step_ratios[name].append(rows[name]["step"] / rows["dance"]["step"])
        counts = {name: c.row for name, c in clocks.items()}
    ideal = trained[0] / trained[1]
    measured = statistics.median(ratios)
    bwd = counts["mix"]["count/transformer_bwd"] / counts["dance"]["count/transformer_bwd"]
    flash_ideal = rollout_fwd[0] / rollout_fwd[1]
    flash_measured = statistics.median(rollout_ratios)
    steps = {name: statistics.median(v) for name, v in step_ratios.items()}
    print(f"model: FLUX {args.config} at {args.size}x{args.size}, update_batch {args.update_batch}")
    print(
        f"trained steps per sample: mix_grpo {trained[0]}, dance_grpo {trained[1]} ({STEPS} sampling steps, {args.clock} clock)"
    )
    print(f"update time ratio mix/dance: measured {measured:.3f} (rounds {[round(x, 3) for x in ratios]})")
    print(f"                             ideal    {ideal:.3f}  (off by {100 * (measured / ideal - 1):+.1f} %)")
    print(f"backward rows ratio (counted): {bwd:.3f}")
    print(f"rollout evaluations per sample: mix_grpo_flash {rollout_fwd[0]}, mix_grpo {rollout_fwd[1]}")
    print(
        f"rollout time ratio flash/mix: measured {flash_measured:.3f} (rounds {[round(x, 3) for x in rollout_ratios]})"
    )
    print(
        f"                              ideal    {flash_ideal:.3f}  (off by {100 * (flash_measured / flash_ideal - 1):+.1f} %)"
    )
    print(f"step time ratio against dance (measured): mix {steps['mix']:.3f}, flash {steps['flash']:.3f}")
    print(
        json.dumps(
            {
                "update_time_ratio": measured,
                "ideal_update_time_ratio": ideal,
                "bwd_count_ratio": bwd,
                "flash_rollout_time_ratio": flash_measured,
                "ideal_flash_rollout_time_ratio": flash_ideal,
                "step_time_ratio_mix": steps["mix"],
                "step_time_ratio_flash": steps["flash"],
                "rounds": rounds,
                "update_batch": args.update_batch,
                "clock": args.clock,
                "config": args.config,
                "size": args.size,
            }
        )
    )


if __name__ == "__main__":
    main()
