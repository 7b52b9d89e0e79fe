"""Speed of JAGG against its baseline at the paper's settings, measured side by side in one process.

Two trainers (the real loop of launcher/train/trainer.py) over the same FLUX-class model take turns step by step (the order
alternates every round): one runs the baseline exactly on the steps JAGG trains, the other ``method=jagg`` over it,
both at the same ``method.update_batch`` (``--update-batch``, rows per transformer call of the update;
docs/performance.md). ``--base`` picks the pair:

* ``dance_grpo`` (default): DanceGRPO on all 20 trainable steps of 21 sampling steps (``timestep_fraction=1``)
  against JAGG with W = 4, jagg_frac 0.6 (groups 0-2 JAGG, 3-4 exact; eta 0.3, shift 3), the setting of the paper's
  whole-step figures;
* ``flow_grpo_fast``: Flow-GRPO-Fast with an SDE window of 4 (its stock sampler: 10 steps, CPS, a = 0.8) against
  JAGG's stock over it (W = 4 = the window, jagg_frac 1: the window is one JAGG group), the baseline of the paper's
  update-phase figure.

Ratios are medians over the measured rounds of each round's JAGG / baseline ratio (the two steps of a round ran back
to back, under the same machine load).

It prints, for the update phase and the whole step, the time ratio JAGG / baseline, the transformer forward and
backward row counts (counted on the model), and the *ideal* update-time ratio: the transformer calls each method made
in its update (recorded: rows per call, with or without a graph), priced with the cost of one such call measured on
the same model after the rounds (scripts/call_costs.py). At update_batch B the baseline makes M rows per sample in
calls of B rows (forward + backward); JAGG, per JAGG group, one call of both endpoints of B/2 samples (forward +
backward) and graph-free calls of the intermediate steps, and its exact groups' rows in calls of B. Targets:
measured update ratio within 10% of the ideal, backward row ratio exactly (2 n_J + M - n_J W) / M (0.7 and 0.5 for
the two pairs; M trained steps per sample, n_J JAGG groups of W).

On the CPU, time is the process's CPU time by default (``--clock auto`` = ``cpu``; with one torch thread, the work
done, which other jobs on a shared machine do not inflate); ``--clock wall`` uses the trainer's wall-clock timers
instead (both are printed). On a GPU (``--device cuda``) the process's CPU time says nothing about the work, so
``auto`` means ``wall`` there, and the call costs are timed with the device synchronised around each call.
The last output line is one JSON object (``update_time_ratio``, ``step_time_ratio``, ``ideal_update_time_ratio``,
``bwd_count_ratio``, ...).

    .venv/bin/python scripts/bench_jagg.py                  # FLUX "small", 64x64, update_batch 8: ~2 CPU-min
    .venv/bin/python scripts/bench_jagg.py --update-batch 1 # one row per call, as the methods ran before batching
    .venv/bin/python scripts/bench_jagg.py --base flow_grpo_fast
    .venv/bin/python scripts/bench_jagg.py --config medium --rounds 8 --clock wall
    .venv/bin/python scripts/bench_jagg.py --device cuda --config wide --size 128   # FLUX.1 block width on a GPU
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


from call_costs import describe, priced, probe_costs, record_update_calls  # noqa: E402
from flux_bench_models import CONFIGS, model_folder  # noqa: E402  (docs/development.md#the-flux-small-configuration)
from launcher.config import compose  # noqa: E402

# Per baseline: overrides of both trainers, then of the baseline (exact, on the steps JAGG trains) and of JAGG.
SETUPS = {
    "dance_grpo": dict(
        common=["method.sampling_steps=21", "method.eta=0.3", "method.shift=3.0"],
        baseline=["method=dance_grpo", "method.timestep_fraction=1.0"],  # all 20 steps, exact
        jagg=["method=jagg", "method.base=dance_grpo", "method.window=4", "method.jagg_frac=0.6"],
    ),
    "flow_grpo_fast": dict(
        common=[],  # Fast's stock sampler (10 steps, CPS)
        baseline=["method=flow_grpo_fast", "method.window_size=4"],  # JAGG's stock window, exact
        jagg=["method=jagg", "method.base=flow_grpo_fast", "method.window=4", "method.jagg_frac=1.0"],
    ),
}


class CPUClock:
    """CPU seconds of this process spent in a trainer's update phase (advantages, backward calls, optimizer steps:
    the method's public hooks and the optimizer) and in whole steps. With one torch thread this is the work done,
    which other jobs on a shared machine do not inflate, unlike wall-clock."""

    def __init__(self, trainer):
        self.update = 0.0
        method = trainer.method
        for owner, name in (
            (method, "prepare_update"),
            (method, "update_plan"),
            (method, "backward"),
            (trainer.optimizer, "step"),
        ):
            setattr(owner, name, self._timed(getattr(owner, name)))

    def _timed(self, fn):
        def wrapper(*args, **kwargs):
            t0 = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.update += time.process_time() - t0

        return wrapper


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--base",
        choices=sorted(SETUPS),
        default="dance_grpo",
        help="the baseline JAGG accelerates (see the module docstring)",
    )
    ap.add_argument("--config", choices=sorted(CONFIGS), default="small")
    ap.add_argument("--size", type=int, default=64, help="image side in pixels (64 -> 256 image tokens)")
    ap.add_argument("--samples", type=int, default=4, help="samples per step (one prompt group)")
    ap.add_argument("--rounds", type=int, default=6, help="measured rounds (each: one step of each method)")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1 is steadiest on a shared CPU)")
    ap.add_argument("--probe-reps", type=int, default=5)
    ap.add_argument("--update-batch", type=int, default=8, help="method.update_batch of both methods")
    ap.add_argument(
        "--clock",
        choices=("auto", "cpu", "wall"),
        default="auto",
        help="which time the JSON ratios use: process CPU seconds (steady on a shared machine) or wall; "
        "auto: cpu on the CPU, wall on a GPU",
    )
    ap.add_argument("--device", default="auto", help="model.device: auto (cuda if available), cpu or cuda")
    args = ap.parse_args()

    from launcher.train.trainer import RunInfo, Trainer

    folder = model_folder(args.config)
    common = [
        "logger=none",
        "model=tiny_flux",
        f"model.path={folder}",
        f"model.device={args.device}",
        f"model.height={args.size}",
        f"model.width={args.size}",
        "trainer.sample_every=0",
        "trainer.progress=false",
        f"trainer.threads={args.threads}",
        f"method.group_size={args.samples}",
        "method.prompts_per_step=1",
        f"method.update_batch={args.update_batch}",
        "method.updates_per_rollout=2",
    ]
    pair = SETUPS[args.base]
    setups = {name: [*pair[name], *common, *pair["common"]] for name in ("baseline", "jagg")}
    with tempfile.TemporaryDirectory() as tmp:
        trainers = {name: Trainer(compose(ov), RunInfo(run_dir=Path(tmp) / name)) for name, ov in setups.items()}
        device = trainers["jagg"].backbone.device
        if args.clock == "auto":
            args.clock = "wall" if device.type == "cuda" else "cpu"
        n_params = sum(p.numel() for p in trainers["jagg"].params)
        jcfg, lay = trainers["jagg"].cfg.method, trainers["jagg"].method.layout
        print(
            f"model: FLUX {args.config} ({n_params / 1e6:.2f} M params), {args.size}x{args.size} "
            f"({trainers['jagg'].backbone.latent_shape[0]} image tokens), {args.samples} samples/step, "
            f"{jcfg.sampling_steps} sampling steps ({jcfg.noise_kernel} kernel), JAGG over {args.base}: "
            f"{lay.num_steps} trained steps, {lay.num_groups} group(s) of {lay.window}, {lay.num_jagg} JAGG; "
            f"{args.threads} thread(s), {device}; {args.warmup} warm-up + {args.rounds} measured rounds, "
            f"{args.clock} clock"
        )
        clocks = {name: CPUClock(t) for name, t in trainers.items()}
        recorders = {name: record_update_calls(t) for name, t in trainers.items()}
        rows: dict[str, list[dict]] = {name: [] for name in trainers}
        calls = {}
        for r in range(args.warmup + args.rounds):
            order = list(trainers) if r % 2 == 0 else list(trainers)[::-1]
            for name in order:
                clocks[name].update, t0 = 0.0, time.process_time()
                m = dict(trainers[name].train_step(r))
                m.update({"cpu/step_s": time.process_time() - t0, "cpu/update_s": clocks[name].update})
                calls[name] = recorders[name].take()  # the same calls every step
                if r >= args.warmup:
                    rows[name].append(m)
            print(
                f"round {r}{' (warm-up)' if r < args.warmup else ''}: "
                + ", ".join(
                    f"{n} update {clocks[n].update:.2f} CPU s / {trainers[n].logger.history[-1]['time/update_s']:.2f} s"
                    for n in order
                ),
                flush=True,
            )
        costs = probe_costs(
            trainers["jagg"].backbone, set(calls["jagg"]) | set(calls["baseline"]), args.probe_reps, args.clock
        )
    ideal = priced(calls["jagg"], costs) / priced(calls["baseline"], costs)

    keys = (
        "cpu/update_s",
        "cpu/step_s",
        "time/update_s",
        "time/step_s",
        "time/rollout_s",
        "count/transformer_fwd",
        "count/transformer_bwd",
    )
    med = {n: {k: statistics.median(row[k] for row in rs) for k in keys} for n, rs in rows.items()}
    clock = "cpu" if args.clock == "cpu" else "time"
    m, w, n_j = lay.num_steps, lay.window, lay.num_jagg  # every group is trained (group_fraction 1)
    target_bwd = lay.backward_rows_per_sample() / m
    base, jagg = med["baseline"], med["jagg"]

    def paired(key: str) -> float:
        """Median over rounds of the round's JAGG / baseline ratio: the two ran back to back, under the same load."""
        return statistics.median(j[key] / b[key] for j, b in zip(rows["jagg"], rows["baseline"]))

    result = {
        "update_time_ratio": paired(f"{clock}/update_s"),
        "step_time_ratio": paired(f"{clock}/step_s"),
        "ideal_update_time_ratio": ideal,
        "bwd_count_ratio": jagg["count/transformer_bwd"] / base["count/transformer_bwd"],
        "fwd_count_ratio": jagg["count/transformer_fwd"] / base["count/transformer_fwd"],
        "update_ratio_over_ideal": paired(f"{clock}/update_s") / ideal,
        "cpu_update_time_ratio": paired("cpu/update_s"),
        "cpu_step_time_ratio": paired("cpu/step_s"),
        "wall_update_time_ratio": paired("time/update_s"),
        "wall_step_time_ratio": paired("time/step_s"),
        "clock": args.clock,
        "baseline": base,
        "jagg": jagg,
        "update_calls": {n: describe(c) for n, c in calls.items()},
        "call_costs_s": {f"{rows} rows{' graph' if graph else ''}": v for (rows, graph), v in sorted(costs.items())},
        "config": {
            "model": args.config,
            "params": n_params,
            "size": args.size,
            "samples": args.samples,
            "rounds": args.rounds,
            "threads": args.threads,
            "device": str(device),
            "base": args.base,
            "sampling_steps": int(jcfg.sampling_steps),
            "noise_kernel": str(jcfg.noise_kernel),
            "trained_steps": m,
            "window": w,
            "jagg_frac": float(jcfg.jagg_frac),
            "jagg_groups": n_j,
            "target_bwd_count_ratio": target_bwd,
            "update_batch": args.update_batch,
        },
    }
    print()
    print(f"{'medians':22}{'baseline':>12}{'jagg':>12}{'ratio':>10}{'paired':>10}")
    for key, label in (
        ("cpu/update_s", "update phase (CPU s)"),
        ("cpu/step_s", "whole step (CPU s)"),
        ("time/update_s", "update phase (wall s)"),
        ("time/step_s", "whole step (wall s)"),
        ("time/rollout_s", "rollout (wall s)"),
        ("count/transformer_fwd", "transformer fwd rows"),
        ("count/transformer_bwd", "transformer bwd rows"),
    ):
        print(f"{label:22}{base[key]:>12.3f}{jagg[key]:>12.3f}{jagg[key] / base[key]:>10.3f}{paired(key):>10.3f}")
    for n in ("baseline", "jagg"):
        print(f"{n} update calls per step (update_batch {args.update_batch}): {describe(calls[n])}")
    print(
        "call costs (median): "
        + ", ".join(
            f"{rows} rows{' fwd+bwd' if graph else ' fwd'} {v * 1e3:.1f} ms"
            for (rows, graph), v in sorted(costs.items())
        )
    )
    print(f"ratios below: the {args.clock} clock, median of the rounds' paired ratios")
    print(
        f"ideal update-time ratio {ideal:.3f} (the calls made, priced at their measured costs); measured "
        f"{result['update_time_ratio']:.3f} = {result['update_ratio_over_ideal']:.3f} x ideal "
        f"({'within' if abs(result['update_ratio_over_ideal'] - 1) <= 0.10 else 'NOT within'} 10%); "
        f"backward rows {result['bwd_count_ratio']:.3f} (target {target_bwd:.3f})"
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
