"""Flash-GRPO against full-trajectory Flow-GRPO and Flow-GRPO-Fast: update-phase and whole-step wall-clock and
transformer pass counts, measured side by side in one process.

All three methods run through the shared trainer loop (``Trainer.train_step``) on the same model, batch, sampling
steps (20) and ``method.update_batch`` (rows per transformer call of the update, ``--update-batch``), with KL off for
all; steps alternate between the methods (the order rotates every round) and every figure is the median over the
measured rounds. The ideal update ratio prices the transformer calls each method made in its update (rows per call,
with a graph) with the cost of one such call measured on the same model after the rounds (scripts/call_costs.py):
Flash-GRPO trains one row per sample, Flow-GRPO 19, each in calls of ``update_batch`` rows. The model (``--config``)
is by default the FLUX
"small" configuration (docs/development.md#the-flux-small-configuration: ``FluxTransformer2DModel``, ~2.3M
parameters, the tiny twin's text encoders widened to match), built and loaded through the same tiny-twin path as
``model=tiny_flux``, so transformer passes dominate the cost; ``tiny`` is the twin's own transformer (smoke runs),
``wide`` FLUX.1-dev's block width (for a GPU, ``--device cuda``).

    .venv/bin/python scripts/bench_flash.py                  # ~3-5 min on 2 CPU cores
    .venv/bin/python scripts/bench_flash.py --rounds 3 --group-size 2
    .venv/bin/python scripts/bench_flash.py --device cuda --config wide --size 128

The last output line is one JSON object (keys ``update_time_ratio_vs_flow_grpo``, ``step_time_ratio_vs_flow_grpo``,
``bwd_count_ratio_vs_flow_grpo``, ...). Ratios are Flash-GRPO / baseline (lower is cheaper).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from call_costs import describe, priced, probe_costs, record_update_calls  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

METHODS = ("flash_grpo", "flow_grpo", "flow_grpo_fast")


def model_folder(config: str) -> Path:
    """The folder of ``--config`` (scripts/flux_bench_models.py); ``small`` with its text inputs and encoders at width
    64, ``tiny`` and ``wide`` with the twin's text encoders."""
    from flux_bench_models import model_folder as folder

    return folder(config, wide_text=config == "small")


def build_trainers(args, run_root: Path) -> dict:
    from launcher.config import compose
    from launcher.train.trainer import RunInfo, Trainer

    common = [
        "logger=none",
        "model=tiny_flux",
        f"model.path={model_folder(args.config)}",
        f"model.device={args.device}",
        f"method.sampling_steps={args.sampling_steps}",
        f"method.group_size={args.group_size}",
        f"method.prompts_per_step={args.prompts}",
        f"method.update_batch={args.update_batch}",
        "method.kl_beta=0",
        "trainer.sample_every=0",
        "trainer.progress=false",
        f"trainer.threads={args.threads}",
        f"model.height={args.size}",
        f"model.width={args.size}",
    ]
    extra = {"flow_grpo_fast": [f"method.window_size={args.fast_window}"]}
    trainers = {}
    for name in METHODS:
        cfg = compose([f"method={name}", *common, *extra.get(name, [])])
        trainers[name] = Trainer(cfg, RunInfo(run_dir=run_root / name))
    return trainers


def median(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=5, help="measured steps per method (median)")
    p.add_argument("--warmup", type=int, default=1, help="unmeasured steps per method first")
    p.add_argument("--sampling-steps", type=int, default=20)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--prompts", type=int, default=2)
    # --micro-batch: the flag's old name (one row per Flash-GRPO sample without CFG, so the same number)
    p.add_argument(
        "--update-batch",
        "--micro-batch",
        dest="update_batch",
        type=int,
        default=8,
        help="method.update_batch of every method",
    )
    p.add_argument("--probe-reps", type=int, default=5, help="timed calls per kind for the ideal ratio")
    p.add_argument("--fast-window", type=int, default=2, help="Flow-GRPO-Fast SDE window (its default: 2)")
    p.add_argument("--size", type=int, default=32, help="image side in pixels (32 -> 64 transformer tokens)")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (0 = the trainer's default); 1 is the most repeatable on a shared machine",
    )
    p.add_argument("--config", choices=("small", "tiny", "wide"), default="small", help="transformer size (above)")
    p.add_argument("--device", default="auto", help="model.device: auto (cuda if available), cpu or cuda")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)

    import torch

    with tempfile.TemporaryDirectory() as tmp:
        trainers = build_trainers(args, Path(tmp))
        n_params = sum(prm.numel() for prm in trainers["flash_grpo"].backbone.transformer.parameters())
        device = trainers["flash_grpo"].backbone.device
        rows: dict[str, list[dict]] = {m: [] for m in METHODS}
        recorders = {name: record_update_calls(t) for name, t in trainers.items()}
        calls: dict[str, Counter] = {m: Counter() for m in METHODS}
        for r in range(args.warmup + args.rounds):
            order = METHODS[r % 3 :] + METHODS[: r % 3]  # rotate so no method always runs first
            for name in order:
                m = trainers[name].train_step(r)
                step_calls = recorders[name].take()
                if r >= args.warmup:
                    rows[name].append(m)
                    calls[name] += step_calls
            print(
                f"round {r}: " + "  ".join(f"{n} {rows[n][-1]['time/step_s']:.2f}s" if rows[n] else n for n in METHODS),
                flush=True,
            )
        kinds = set().union(*calls.values())
        costs = probe_costs(trainers["flash_grpo"].backbone, kinds, args.probe_reps, "wall")

    keys = (
        "time/rollout_s",
        "time/reward_s",
        "time/update_s",
        "time/step_s",
        "count/transformer_fwd",
        "count/transformer_bwd",
    )
    med = {n: {k: median(rows[n], k) for k in keys} for n in METHODS}
    b, steps = args.group_size * args.prompts, args.sampling_steps
    print(
        f"\nFLUX {args.config} ({n_params / 1e6:.2f}M params, {(args.size // 4) ** 2} tokens), {b} samples/step, "
        f"{steps} sampling steps, torch threads {torch.get_num_threads()}; medians of {args.rounds} rounds"
    )
    print(f"{'method':16s} {'rollout_s':>10s} {'update_s':>10s} {'step_s':>10s} {'fwd':>6s} {'bwd':>6s}")
    for n in METHODS:
        v = med[n]
        print(
            f"{n:16s} {v['time/rollout_s']:10.3f} {v['time/update_s']:10.3f} {v['time/step_s']:10.3f} "
            f"{v['count/transformer_fwd']:6.0f} {v['count/transformer_bwd']:6.0f}"
        )

    flash, flow, fast = med["flash_grpo"], med["flow_grpo"], med["flow_grpo_fast"]
    ratio = lambda a, c, k: a[k] / c[k]  # noqa: E731
    trained_flow = flow["count/transformer_bwd"] / b  # floor(0.99 N) = 19 at N = 20
    # ideal: the update's transformer calls priced at their measured costs; the step keeps the same rollout + reward
    ideal_update = priced(calls["flash_grpo"], costs) / priced(calls["flow_grpo"], costs)
    ideal_step = (flow["time/rollout_s"] + flow["time/reward_s"] + flow["time/update_s"] * ideal_update) / flow[
        "time/step_s"
    ]
    out = {
        "update_time_ratio_vs_flow_grpo": ratio(flash, flow, "time/update_s"),
        "step_time_ratio_vs_flow_grpo": ratio(flash, flow, "time/step_s"),
        "bwd_count_ratio_vs_flow_grpo": ratio(flash, flow, "count/transformer_bwd"),
        "fwd_count_ratio_vs_flow_grpo": ratio(flash, flow, "count/transformer_fwd"),
        "update_time_ratio_vs_flow_grpo_fast": ratio(flash, fast, "time/update_s"),
        "step_time_ratio_vs_flow_grpo_fast": ratio(flash, fast, "time/step_s"),
        "bwd_count_ratio_vs_flow_grpo_fast": ratio(flash, fast, "count/transformer_bwd"),
        "ideal_update_ratio_vs_flow_grpo": ideal_update,
        "ideal_step_ratio_vs_flow_grpo": ideal_step,
        "ideal_bwd_count_ratio_vs_flow_grpo_fast": 1.0 / args.fast_window,
        "rollout_share_of_flash_step": flash["time/rollout_s"] / flash["time/step_s"],
        "update_speedup_vs_flow_grpo": 1.0 / ratio(flash, flow, "time/update_s"),
        "step_speedup_vs_flow_grpo": 1.0 / ratio(flash, flow, "time/step_s"),
        "ideal_update_ratio_vs_flow_grpo_fast": priced(calls["flash_grpo"], costs)
        / priced(calls["flow_grpo_fast"], costs),
        "update_calls_per_round": {n: describe(c) for n, c in calls.items()},
        "sampling_steps": steps,
        "samples_per_step": b,
        "rounds": args.rounds,
        "model_params": n_params,
        "config": args.config,
        "device": str(device),
        "update_batch": args.update_batch,
    }
    print(
        f"\nupdate phase: Flash-GRPO / Flow-GRPO = {out['update_time_ratio_vs_flow_grpo']:.3f} "
        f"({out['update_speedup_vs_flow_grpo']:.1f}x cheaper; ideal {ideal_update:.3f}: the calls made, at their "
        f"measured costs, update_batch {args.update_batch}, {trained_flow:.0f} trained steps per Flow-GRPO "
        f"sample); backward passes {out['bwd_count_ratio_vs_flow_grpo']:.3f}"
    )
    print(
        f"whole step:   Flash-GRPO / Flow-GRPO = {out['step_time_ratio_vs_flow_grpo']:.3f} "
        f"({out['step_speedup_vs_flow_grpo']:.2f}x; ideal {ideal_step:.3f} with the same rollout): the "
        f"{steps}-step rollout is {100 * out['rollout_share_of_flash_step']:.0f}% of a Flash-GRPO step"
    )
    print(
        f"vs Flow-GRPO-Fast (window {args.fast_window}): update {out['update_time_ratio_vs_flow_grpo_fast']:.3f}, "
        f"step {out['step_time_ratio_vs_flow_grpo_fast']:.3f}, backward passes "
        f"{out['bwd_count_ratio_vs_flow_grpo_fast']:.3f}"
    )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
