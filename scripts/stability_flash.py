"""Stability of Flash-GRPO on the CPU demo: reward curves and gradient-norm spread over seeds, against the ablation
without iso-temporal grouping and without rectification (``iso_temporal=false rectify=false``, ~ "Fast1", the
single-SDE-step baseline the paper reports collapsing: arXiv:2605.15980, Fig. 4; docs/methods/flash_grpo.md).

Every run is the default CPU demo (``conf/train.yaml``: tiny FLUX twin, colour reward, 8 x 4 samples, 10 sampling
steps) with ``method=flash_grpo`` and the variant's flags, trained in this process through the shared trainer. The
training reward of a step depends on which prompts and noise it drew, so the policy is also evaluated every
``--eval-every`` steps on fixed inputs: deterministic ODE samples of every demo prompt from fixed initial noise.
Variants: ``flash``, ``itg`` (rectify=false), ``fast1`` (iso_temporal=false rectify=false), and ``flash_shared``,
``itg_shared``, ``fast1_shared`` (the same with one initial latent per group).

    nice -n 10 .venv/bin/python scripts/stability_flash.py trainer.threads=1             # flash vs fast1, 3 seeds
    nice -n 10 .venv/bin/python scripts/stability_flash.py --variants flash,itg,fast1 --steps 100

Writes ``<out>/<variant>_seed<k>/{metrics.jsonl,eval.json}`` and ``<out>/stability.png``; the last output line is
one JSON object.
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
    "flash": [],  # iso-temporal + rectified (the method)
    "itg": ["method.rectify=false"],  # iso-temporal grouping only
    "fast1": ["method.iso_temporal=false", "method.rectify=false"],  # per-sample k*, no weights
    # the same two with one initial latent per group: reward differences within a group then come from the SDE
    # step alone, which is where timestep-confounded grouping should hurt most (docs/results.md#flash-grpo)
    "flash_shared": ["method.share_init_noise=true"],
    "itg_shared": ["method.rectify=false", "method.share_init_noise=true"],
    "fast1_shared": ["method.iso_temporal=false", "method.rectify=false", "method.share_init_noise=true"],
}


def build(variant: str, seed: int, steps: int, out: Path, extra: list[str]):
    from launcher.config import compose
    from launcher.train.trainer import RunInfo, Trainer

    cfg = compose(
        [
            "method=flash_grpo",
            "logger=none",
            f"trainer.seed={seed}",
            f"trainer.steps={steps}",
            "trainer.sample_every=0",
            "trainer.progress=false",
            *VARIANTS[variant],
            *extra,
        ]
    )
    return Trainer(cfg, RunInfo(run_dir=out / f"{variant}_seed{seed}"))


def evaluate(trainer, per_prompt: int = 8, seed: int = 1234) -> float:
    """Mean reward of deterministic ODE samples (Euler on the training sigmas, no SDE step) of every prompt of the
    data set from fixed initial noise: the same images for every variant and step, so the curve measures the policy,
    not which prompts and noise a step happened to draw (evaluation keeps a deterministic sampler, as upstream)."""
    import torch

    method, bb = trainer.method, trainer.backbone
    prompts = [p for p in trainer.prompts for _ in range(per_prompt)]
    with torch.no_grad():
        embeds = bb.encode_prompts(prompts)
        x = bb.initial_noise(len(prompts), torch.Generator().manual_seed(seed))
        for i in range(method.sde.num_steps):
            idx = torch.full((len(prompts),), i, dtype=torch.long, device=x.device)
            v = bb.velocity(x, method.model_time(method.sde.sigma(idx)).float(), embeds)
            x = method.sde.step(x, v, idx, stochastic=False).prev_sample
        return float(trainer.reward(bb.decode(x).float(), prompts).mean())


def train(variant: str, seed: int, steps: int, out: Path, extra: list[str], eval_every: int):
    """Train through the shared loop step by step; evaluate before step 0, every ``eval_every`` steps and at the end."""
    trainer = build(variant, seed, steps, out, extra)
    evals = [(0, evaluate(trainer))]
    for step in range(steps):
        trainer.train_step(step)
        if (step + 1) % eval_every == 0 or step == steps - 1:
            evals.append((step + 1, evaluate(trainer)))
    (out / f"{variant}_seed{seed}" / "eval.json").write_text(json.dumps(evals))
    return trainer.logger.history, evals


def window_mean(rows: list[dict], key: str, lo: int, hi: int) -> float:
    vals = [r[key] for r in rows[lo:hi] if key in r]
    return sum(vals) / len(vals)


def summarise(rows: list[dict], evals: list, window: int) -> dict:
    norms = [r["grad_norm"] for r in rows if "grad_norm" in r]
    q = statistics.quantiles(norms, n=10)
    return {
        "eval_first": evals[0][1],
        "eval_last": evals[-1][1],
        "eval_max": max(v for _, v in evals),
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

    fig, (ax_e, ax_r, ax_g) = plt.subplots(1, 3, figsize=(16, 4))
    colours = {
        "flash": "tab:blue",
        "itg": "tab:green",
        "fast1": "tab:red",
        "flash_shared": "tab:cyan",
        "itg_shared": "tab:olive",
        "fast1_shared": "tab:orange",
    }
    for variant, runs in histories.items():
        for i, (rows, evals) in enumerate(runs):
            steps = [r["step"] for r in rows]
            label = variant if i == 0 else None
            ax_e.plot(
                [s for s, _ in evals], [v for _, v in evals], "o-", color=colours[variant], alpha=0.7, label=label
            )
            ax_r.plot(steps, [r["reward/mean"] for r in rows], color=colours[variant], alpha=0.7, label=label)
            ax_g.plot(
                steps, [r.get("grad_norm", float("nan")) for r in rows], color=colours[variant], alpha=0.5, label=label
            )
    ax_e.set(xlabel="step", ylabel="eval reward", title="deterministic eval, fixed noise (one line per seed)")
    ax_r.set(xlabel="step", ylabel="reward/mean", title="training reward (one line per seed)")
    ax_g.set(xlabel="step", ylabel="grad_norm (before clipping)", yscale="log", title="gradient norm")
    ax_e.legend(), ax_r.legend(), ax_g.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--variants", default="flash,fast1", help=f"comma list of {sorted(VARIANTS)}")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--window", type=int, default=15, help="steps averaged for first/last reward")
    p.add_argument("--eval-every", type=int, default=25, help="steps between deterministic evaluations")
    p.add_argument("--out", default=str(ROOT / "outputs" / "stability_flash"))
    p.add_argument("overrides", nargs="*", help="extra Hydra overrides for every run")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    out = Path(args.out)
    variants, seeds = args.variants.split(","), [int(s) for s in args.seeds.split(",")]

    histories: dict[str, list] = {v: [] for v in variants}
    per_run = {}
    for seed in seeds:  # interleave variants so machine load affects all alike
        for v in variants:
            rows, evals = train(v, seed, args.steps, out, args.overrides, args.eval_every)
            histories[v].append((rows, evals))
            per_run[f"{v}_seed{seed}"] = s = summarise(rows, evals, args.window)
            print(
                f"{v:12s} seed {seed}: eval {s['eval_first']:.4f} -> {s['eval_last']:.4f} (max "
                f"{s['eval_max']:.4f}); training reward {s['reward_first']:.4f} -> {s['reward_last']:.4f}; grad "
                f"norm median {s['grad_norm_median']:.3g}, p90/p10 {s['grad_norm_p90_over_p10']:.2f}, cv "
                f"{s['grad_norm_cv']:.2f}",
                flush=True,
            )
    plot(histories, out / "stability.png")

    summary = {}
    for v in variants:
        runs = [per_run[f"{v}_seed{s}"] for s in seeds]
        gains = [r["reward_last"] - r["reward_first"] for r in runs]
        eval_gains = [r["eval_last"] - r["eval_first"] for r in runs]
        summary[v] = {
            "eval_gain_mean": statistics.mean(eval_gains),
            "eval_gain_min": min(eval_gains),
            "eval_gain_max": max(eval_gains),
            "eval_last_mean": statistics.mean(r["eval_last"] for r in runs),
            "reward_gain_mean": statistics.mean(gains),
            "reward_gain_min": min(gains),
            "reward_last_mean": statistics.mean(r["reward_last"] for r in runs),
            "reward_last_spread": max(r["reward_last"] for r in runs) - min(r["reward_last"] for r in runs),
            "grad_norm_cv_mean": statistics.mean(r["grad_norm_cv"] for r in runs),
            "grad_norm_p90_over_p10_mean": statistics.mean(r["grad_norm_p90_over_p10"] for r in runs),
            "grad_norm_median_mean": statistics.mean(r["grad_norm_median"] for r in runs),
            "collapsed_runs": sum(g < 0 for g in eval_gains),
        }
    print(f"\nplot: {out / 'stability.png'}")
    for v, s in summary.items():
        print(
            f"{v:12s}: eval gain {s['eval_gain_mean']:+.4f} [{s['eval_gain_min']:+.4f}, {s['eval_gain_max']:+.4f}]; "
            f"training reward gain {s['reward_gain_mean']:+.4f} (min {s['reward_gain_min']:+.4f}), final "
            f"{s['reward_last_mean']:.4f} +- spread {s['reward_last_spread']:.4f}; grad-norm cv "
            f"{s['grad_norm_cv_mean']:.2f}, p90/p10 {s['grad_norm_p90_over_p10_mean']:.2f}"
        )
    print(json.dumps({"variants": summary, "runs": per_run, "steps": args.steps, "seeds": seeds}))


if __name__ == "__main__":
    main()
