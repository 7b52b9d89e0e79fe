"""DiffusionNFT and AWM against Flow-GRPO (and Flow-GRPO-Fast) at equal samples per step: update-phase and
whole-step wall-clock, transformer pass counts and the memory a rollout keeps, measured side by side in one process.

The three methods run through the shared trainer loop (``Trainer.train_step``) on the same model, batch (group size
x prompts), sampling steps and ``method.update_batch`` (rows per transformer call of the update), KL off for all;
steps alternate between the methods (the order rotates every round) and every figure is the median over the
measured rounds. The model is bench_flash.py's (``--config``;
default the FLUX "small" transformer, ~2.3M parameters), so transformer passes dominate. No method uses CFG here
(FLUX is guidance-distilled); on a CFG family Flow-GRPO would pay two rows per pass and DiffusionNFT one.

    .venv/bin/python scripts/bench_nft.py                   # ~3-6 min on 2 CPU cores
    .venv/bin/python scripts/bench_nft.py --rounds 3 --group-size 2
    .venv/bin/python scripts/bench_nft.py --device cuda --config wide --size 128

With N sampling steps both methods train floor(0.99 N) times per sample (Flow-GRPO its first SDE transitions,
DiffusionNFT random grid times of the clean sample): the same backward passes, and DiffusionNFT one more forward per
trained time (``v_old``), so its update is expected to cost about (2F + B) / (F + B) of Flow-GRPO's (~4/3 when a
backward costs two forwards); its rollout is a plain ODE solve and keeps only the final latents. AWM (its recipe's
EMA-policy KL on, the reference KL off as for the others) trains the same floor(0.99 N) times per sample
(``method.train_timesteps``) with one forward of the EMA policy and the trained forward each: ideally DiffusionNFT's
update exactly (ratio 1) and the same (2F + B) / (F + B) of Flow-GRPO's.

The last output line is one JSON object (``update_time_ratio_vs_flow_grpo``, ``step_time_ratio_vs_flow_grpo``,
``bwd_count_ratio_vs_flow_grpo``, ..., and ``awm_*`` for AWM). Ratios are DiffusionNFT (AWM) / baseline (lower is
cheaper).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

METHODS = ("diffusion_nft", "flow_grpo", "flow_grpo_fast", "awm")


def build_trainers(args, run_root: Path) -> dict:
    from bench_flash import model_folder
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
        "method.updates_per_rollout=1",
        "trainer.sample_every=0",
        "trainer.progress=false",
        f"trainer.threads={args.threads}",
        f"model.height={args.size}",
        f"model.width={args.size}",
    ]
    extra = {
        "diffusion_nft": [f"method.sampler={args.sampler}"],
        "flow_grpo_fast": [f"method.window_size={args.fast_window}"],
        "awm": [f"method.sampler={args.sampler}", f"method.train_timesteps={int(0.99 * args.sampling_steps)}"],
    }
    trainers = {}
    for name in METHODS:
        cfg = compose([f"method={name}", *common, *extra.get(name, [])])
        trainers[name] = Trainer(cfg, RunInfo(run_dir=run_root / name))
    return trainers


def rollout_bytes_per_sample(trainer) -> float:
    """Bytes of every tensor a rollout keeps for its update (latents, log-probs, trained indices, extras), per
    sample; text embeddings and decoded images are the same for every method and left out."""
    import torch

    prompts = trainer.data.batch(0, int(trainer.cfg.method.prompts_per_step))
    rollout = trainer.method.rollout(prompts, torch.Generator().manual_seed(0))
    kept = [rollout.latents, rollout.log_probs, rollout.train_steps, *rollout.extras.values()]
    return sum(t.numel() * t.element_size() for t in kept if torch.is_tensor(t)) / len(rollout)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=5, help="measured steps per method (median)")
    p.add_argument("--warmup", type=int, default=1, help="unmeasured steps per method first")
    p.add_argument("--sampling-steps", type=int, default=10, help="N for every method (the authors' SD3.5-M value)")
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--prompts", type=int, default=2)
    p.add_argument("--update-batch", type=int, default=8, help="method.update_batch of every method")
    p.add_argument("--sampler", default="dpmpp_2m", help="DiffusionNFT's rollout solver (euler, dpmpp_2m, unipc)")
    p.add_argument("--fast-window", type=int, default=2, help="Flow-GRPO-Fast SDE window (its default: 2)")
    p.add_argument("--size", type=int, default=32, help="image side in pixels (32 -> 64 transformer tokens)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (0 = the trainer's default)")
    p.add_argument("--config", choices=("small", "tiny", "wide"), default="small", help="transformer size")
    p.add_argument("--device", default="auto", help="model.device: auto (cuda if available), cpu or cuda")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)

    import torch

    with tempfile.TemporaryDirectory() as tmp:
        trainers = build_trainers(args, Path(tmp))
        n_params = sum(prm.numel() for prm in trainers["diffusion_nft"].backbone.transformer.parameters())
        device = trainers["diffusion_nft"].backbone.device
        memory = {n: rollout_bytes_per_sample(trainers[n]) for n in METHODS}
        rows: dict[str, list[dict]] = {m: [] for m in METHODS}
        for r in range(args.warmup + args.rounds):
            k = r % len(METHODS)
            order = METHODS[k:] + METHODS[:k]  # rotate so no method always runs first
            for name in order:
                m = trainers[name].train_step(r)
                if r >= args.warmup:
                    rows[name].append(m)
            print(
                f"round {r}: " + "  ".join(f"{n} {rows[n][-1]['time/step_s']:.2f}s" if rows[n] else n for n in METHODS),
                flush=True,
            )

    keys = (
        "time/rollout_s",
        "time/reward_s",
        "time/update_s",
        "time/step_s",
        "count/transformer_fwd",
        "count/transformer_bwd",
    )
    med = {n: {k: statistics.median(row[k] for row in rows[n]) for k in keys} for n in METHODS}
    b, steps = args.group_size * args.prompts, args.sampling_steps
    print(
        f"\nFLUX {args.config} ({n_params / 1e6:.2f}M params, {(args.size // 4) ** 2} tokens), {b} samples/step, "
        f"{steps} sampling steps (DiffusionNFT: {args.sampler}), torch threads {torch.get_num_threads()}; "
        f"medians of {args.rounds} rounds"
    )
    print(
        f"{'method':16s} {'rollout_s':>10s} {'update_s':>10s} {'step_s':>10s} {'fwd':>6s} {'bwd':>6s} "
        f"{'rollout KiB/sample':>19s}"
    )
    for n in METHODS:
        v = med[n]
        print(
            f"{n:16s} {v['time/rollout_s']:10.3f} {v['time/update_s']:10.3f} {v['time/step_s']:10.3f} "
            f"{v['count/transformer_fwd']:6.0f} {v['count/transformer_bwd']:6.0f} {memory[n] / 1024:19.1f}"
        )

    nft = med["diffusion_nft"]
    out: dict[str, object] = {}
    for base in ("flow_grpo", "flow_grpo_fast"):
        ref = med[base]
        out.update(
            {
                f"update_time_ratio_vs_{base}": nft["time/update_s"] / ref["time/update_s"],
                f"step_time_ratio_vs_{base}": nft["time/step_s"] / ref["time/step_s"],
                f"bwd_count_ratio_vs_{base}": nft["count/transformer_bwd"] / ref["count/transformer_bwd"],
                f"fwd_count_ratio_vs_{base}": nft["count/transformer_fwd"] / ref["count/transformer_fwd"],
                f"rollout_time_ratio_vs_{base}": nft["time/rollout_s"] / ref["time/rollout_s"],
                f"rollout_bytes_ratio_vs_{base}": memory["diffusion_nft"] / memory[base],
            }
        )
    out.update(
        {
            "rollout_bytes_per_sample": memory,
            "sampling_steps": steps,
            "samples_per_step": b,
            "sampler": args.sampler,
            "rounds": args.rounds,
            "model_params": n_params,
            "config": args.config,
            "device": str(device),
        }
    )
    print(
        f"\nupdate phase: DiffusionNFT / Flow-GRPO = {out['update_time_ratio_vs_flow_grpo']:.3f} with "
        f"{out['bwd_count_ratio_vs_flow_grpo']:.2f}x the backward and {out['fwd_count_ratio_vs_flow_grpo']:.2f}x "
        f"the forward passes of the whole step; whole step {out['step_time_ratio_vs_flow_grpo']:.3f}"
    )
    print(
        f"rollout: {out['rollout_time_ratio_vs_flow_grpo']:.3f}x the time, "
        f"{out['rollout_bytes_ratio_vs_flow_grpo']:.3f}x the memory kept per sample (final latents only)"
    )
    print(
        f"vs Flow-GRPO-Fast (window {args.fast_window}): update {out['update_time_ratio_vs_flow_grpo_fast']:.3f}, "
        f"step {out['step_time_ratio_vs_flow_grpo_fast']:.3f}, backward passes "
        f"{out['bwd_count_ratio_vs_flow_grpo_fast']:.3f}"
    )
    awm = med["awm"]
    for base in ("diffusion_nft", "flow_grpo"):
        ref = med[base]
        out.update(
            {
                f"awm_update_time_ratio_vs_{base}": awm["time/update_s"] / ref["time/update_s"],
                f"awm_step_time_ratio_vs_{base}": awm["time/step_s"] / ref["time/step_s"],
                f"awm_bwd_count_ratio_vs_{base}": awm["count/transformer_bwd"] / ref["count/transformer_bwd"],
            }
        )
    print(
        f"AWM update: {out['awm_update_time_ratio_vs_diffusion_nft']:.3f}x DiffusionNFT's (ideal 1: the same passes), "
        f"{out['awm_update_time_ratio_vs_flow_grpo']:.3f}x Flow-GRPO's (ideal (2F + B) / (F + B), ~4/3); whole step "
        f"{out['awm_step_time_ratio_vs_diffusion_nft']:.3f}x and {out['awm_step_time_ratio_vs_flow_grpo']:.3f}x"
    )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
