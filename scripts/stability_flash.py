"""Stability of Flash-GRPO on the CPU demo: reward curves and gradient-norm spread over seeds, against the ablation
without iso-temporal grouping and without rectification (``iso_temporal=false rectify=false``, ~ "Fast1", the
single-SDE-step baseline the paper reports collapsing, spec flash_grpo.md §E.2, §E.5).

Every run is the default CPU demo (``conf/train.yaml``: tiny FLUX twin, colour reward, 8 x 4 samples, 10 sampling
steps) with ``method=flash_grpo`` and the variant's flags, trained in this process through the shared trainer.

    nice -n 10 .venv/bin/python scripts/stability_flash.py                          # 2 variants x 3 seeds x 150 steps
    nice -n 10 .venv/bin/python scripts/stability_flash.py --variants flash,itg,fast1 --steps 100

Writes ``<out>/<variant>_seed<k>/metrics.jsonl`` and ``<out>/stability.png``; the last output line is one JSON object.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

VARIANTS = {
    "flash": [],                                                        # iso-temporal + rectified (the method)
    "itg": ["method.rectify=false"],                                    # iso-temporal grouping only
    "fast1": ["method.iso_temporal=false", "method.rectify=false"],     # per-sample k*, no weights
}


def train(variant: str, seed: int, steps: int, out: Path, extra: list[str]) -> list[dict]:
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from launcher.config import register_configs
    from launcher.trainer import RunInfo, Trainer

    register_configs()
    GlobalHydra.instance().clear()
    overrides = ["method=flash_grpo", "logger=none", f"trainer.seed={seed}", f"trainer.steps={steps}",
                 "trainer.sample_every=0", "trainer.progress=false", *VARIANTS[variant], *extra]
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose(config_name="train", overrides=overrides)
    trainer = Trainer(cfg, RunInfo(run_dir=out / f"{variant}_seed{seed}"))
    trainer.fit()
    return trainer.logger.history


def window_mean(rows: list[dict], key: str, lo: int, hi: int) -> float:
    vals = [r[key] for r in rows[lo:hi] if key in r]
    return sum(vals) / len(vals)


def summarise(rows: list[dict], window: int) -> dict:
    norms = [r["grad_norm"] for r in rows if "grad_norm" in r]
    q = statistics.quantiles(norms, n=10)
    return {
        "reward_first": window_mean(rows, "reward/mean", 0, window),
        "reward_last": window_mean(rows, "reward/mean", len(rows) - window, len(rows)),
        "reward_max": max(r["reward/mean"] for r in rows),
        "grad_norm_median": statistics.median(norms),
        "grad_norm_p90_over_p10": q[-1] / q[0],
        "grad_norm_cv": statistics.pstdev(norms) / statistics.mean(norms),
        "grad_norm_max": max(norms),
        "clip_frac": window_mean(rows, "policy/clip_frac", 0, len(rows)),
        "pre_update_clip_frac": window_mean(rows, "flash/pre_update_clip_frac", 0, len(rows)),
    }


def plot(histories: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_r, ax_g) = plt.subplots(1, 2, figsize=(11, 4))
    colours = {"flash": "tab:blue", "itg": "tab:green", "fast1": "tab:red"}
    for variant, runs in histories.items():
        for i, rows in enumerate(runs):
            steps = [r["step"] for r in rows]
            label = variant if i == 0 else None
            ax_r.plot(steps, [r["reward/mean"] for r in rows], color=colours[variant], alpha=0.7, label=label)
            ax_g.plot(steps, [r.get("grad_norm", float("nan")) for r in rows], color=colours[variant], alpha=0.5,
                      label=label)
    ax_r.set(xlabel="step", ylabel="reward/mean", title="reward (one line per seed)")
    ax_g.set(xlabel="step", ylabel="grad_norm (before clipping)", yscale="log", title="gradient norm")
    ax_r.legend(), ax_g.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--variants", default="flash,fast1", help=f"comma list of {sorted(VARIANTS)}")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--window", type=int, default=15, help="steps averaged for first/last reward")
    p.add_argument("--out", default=str(ROOT / "outputs" / "stability_flash"))
    p.add_argument("overrides", nargs="*", help="extra Hydra overrides for every run")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    out = Path(args.out)
    variants, seeds = args.variants.split(","), [int(s) for s in args.seeds.split(",")]

    histories: dict[str, list[list[dict]]] = {v: [] for v in variants}
    per_run = {}
    for seed in seeds:                       # interleave variants so machine load affects both alike
        for v in variants:
            rows = train(v, seed, args.steps, out, args.overrides)
            histories[v].append(rows)
            per_run[f"{v}_seed{seed}"] = s = summarise(rows, args.window)
            print(f"{v:6s} seed {seed}: reward {s['reward_first']:.4f} -> {s['reward_last']:.4f} "
                  f"(max {s['reward_max']:.4f}); grad norm median {s['grad_norm_median']:.3g}, p90/p10 "
                  f"{s['grad_norm_p90_over_p10']:.2f}, cv {s['grad_norm_cv']:.2f}", flush=True)
    plot(histories, out / "stability.png")

    summary = {}
    for v in variants:
        runs = [per_run[f"{v}_seed{s}"] for s in seeds]
        gains = [r["reward_last"] - r["reward_first"] for r in runs]
        summary[v] = {
            "reward_gain_mean": statistics.mean(gains),
            "reward_gain_min": min(gains),
            "reward_last_mean": statistics.mean(r["reward_last"] for r in runs),
            "reward_last_spread": max(r["reward_last"] for r in runs) - min(r["reward_last"] for r in runs),
            "grad_norm_cv_mean": statistics.mean(r["grad_norm_cv"] for r in runs),
            "grad_norm_p90_over_p10_mean": statistics.mean(r["grad_norm_p90_over_p10"] for r in runs),
            "grad_norm_median_mean": statistics.mean(r["grad_norm_median"] for r in runs),
            "collapsed_runs": sum(g < 0 for g in gains),
        }
    print(f"\nplot: {out / 'stability.png'}")
    for v, s in summary.items():
        print(f"{v:6s}: reward gain {s['reward_gain_mean']:+.4f} (min {s['reward_gain_min']:+.4f}), final "
              f"{s['reward_last_mean']:.4f} +- spread {s['reward_last_spread']:.4f}; grad-norm cv "
              f"{s['grad_norm_cv_mean']:.2f}, p90/p10 {s['grad_norm_p90_over_p10_mean']:.2f}")
    print(json.dumps({"variants": summary, "runs": per_run, "steps": args.steps, "seeds": seeds}))


if __name__ == "__main__":
    main()
