#!/usr/bin/env python
"""EAM versus Adjoint Matching: per-iteration cost side by side, and reward against wall-clock (issue 5).

Three parts, all on the CPU, each through the shared trainer loop (``Trainer.train_step``):

1. ``cost``: the same tiny Flux twin, the same batch, the same prompts/seeds and the same ``method.update_batch``
   (rows per transformer call, ``--update-batch``; whole samples per loss call) for every method, one training
   iteration of each method in turn (the order alternates every round), after warm-up. Methods: Adjoint Matching at
   the paper's setting (K = 40 memoryless SDE steps, 10 + 10 loss steps), EAM at its defaults (10-step endpoint,
   K_t = 4 loss times) and EAM in AM-parity mode (K_t = 20 on AM's grid). Per-iteration wall-clock (median),
   transformer passes per sample (forwards + backwards, counted on the model) and the ideal time ratio: every
   transformer call of an iteration (rows, with or without a graph) priced at the cost of one such call measured on
   the same model after the rounds (scripts/call_costs.py; the VAE and the reward are not priced). ``--config``
   picks the transformer:
   ``twin`` (``model=tiny_flux`` itself), ``tiny`` (the same transformer with an untrained VAE: no VAE pre-training
   to wait for) or ``wide`` (FLUX.1-dev's block width, models/tiny_flux.py, for a GPU: ``--device cuda``).
2. ``toy``: experiment=toy_eam and experiment=toy_am (the Gaussian problem with a known answer): reward/mean and the
   error of the samples' mean/variance against the analytic tilted target, against training wall-clock; the
   wall-clock at which each first gets within 0.05 of the target.
3. ``demo``: the CPU demo (tiny Flux twin, reward=color, CPU-demo batch) for each method: reward/mean against
   wall-clock, each for the same training wall-clock; the transformer is first pre-trained with flow matching for
   ``--demo-pretrain-steps`` (cached), since EAM's terminal score needs a genuinely pre-trained model.

The last output line is one JSON object with every figure (``iter_time_ratio_am_over_eam`` and
``nfe_ratio_am_over_eam`` first). Run: ``.venv/bin/python scripts/bench_eam.py`` (about 10 min on 2 free cores;
``--parts cost`` takes about a minute).
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
os.environ.update(
    HF_HUB_OFFLINE="1",
    TRANSFORMERS_OFFLINE="1",
    WANDB_MODE="disabled",
    HF_HUB_DISABLE_PROGRESS_BARS="1",
    TOKENIZERS_PARALLELISM="false",
)

import torch  # noqa: E402

from call_costs import CallRecorder, describe, priced, probe_costs  # noqa: E402
from launcher.config import compose  # noqa: E402

COST_VARIANTS = {
    "eam": ["method=eam"],
    "eam_parity": [
        "method=eam",
        "method.loss_timesteps=20",
        "method.time_sampling=am_grid",
        "method.sampling_steps=40",
    ],
    "adjoint_matching": ["method=adjoint_matching", "method.sampling_steps=40"],
}


def make_trainer(overrides: list[str]):
    from launcher.cli import _quiet_libraries
    from launcher.train.trainer import RunInfo, Trainer

    _quiet_libraries()
    cfg = compose(["logger=none", "trainer.progress=false", "trainer.sample_every=0", *overrides])
    return Trainer(cfg, RunInfo(run_dir=Path(tempfile.mkdtemp(prefix="bench_eam_"))))


def say(msg: str = "") -> None:
    print(msg, flush=True)


# ------------------------------------------------------------------------------------------------- 1. cost
def cost_model_overrides(config: str, device: str) -> list[str]:
    """``model.*`` overrides of the cost part: the twin as configured, or a variant folder of models/tiny_flux.py."""
    from flux_bench_models import model_folder

    out = [f"model.device={device}"]
    if config != "twin":
        out.append(f"model.path={model_folder(config)}")
    return out


def bench_cost(args) -> dict:
    b = args.prompts * args.group
    common = [
        f"trainer.threads={args.threads}",
        f"method.prompts_per_step={args.prompts}",
        f"method.group_size={args.group}",
        f"method.update_batch={args.update_batch}",
        f"model.finetune={args.finetune}",
        f"model.height={args.size}",
        f"model.width={args.size}",
        *cost_model_overrides(args.config, args.device),
    ]
    trainers = {name: make_trainer([*ov, *common]) for name, ov in COST_VARIANTS.items()}
    names = list(trainers)
    rec: dict[str, list[dict]] = {n: [] for n in names}
    recorders = {n: CallRecorder(t.backbone) for n, t in trainers.items()}
    calls = {}
    for r in range(args.warmup + args.rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            recorders[name].active = True
            m = trainers[name].train_step(r)
            recorders[name].active = False
            calls[name] = recorders[name].take()  # the same calls every iteration
            if r >= args.warmup:
                rec[name].append(m)
    clock = "wall" if trainers[names[0]].backbone.device.type == "cuda" else "cpu"
    costs = probe_costs(trainers["eam"].backbone, set().union(*calls.values()), args.probe_reps, clock)
    say(
        f"\n== 1. per-iteration cost: Flux twin, {args.config} transformer ({args.finetune}) on "
        f"{trainers[names[0]].backbone.device}, {args.size}x{args.size}, reward=color, {b} samples per iteration, "
        f"{args.rounds} alternating rounds after {args.warmup} warm-up =="
    )
    say(
        f"{'method':<18}{'s/iter (median)':>16}{'rollout s':>11}{'reward s':>10}{'update s':>10}"
        f"{'fwd/sample':>12}{'bwd/sample':>12}{'NFE/sample':>12}"
    )
    out = {}
    for name in names:
        rows = rec[name]
        med = {
            k: statistics.median(r[k] for r in rows)
            for k in ("time/step_s", "time/rollout_s", "time/reward_s", "time/update_s")
        }
        fwd, bwd = rows[-1]["count/transformer_fwd"] / b, rows[-1]["count/transformer_bwd"] / b
        out[name] = {"iter_s": med["time/step_s"], "fwd": fwd, "bwd": bwd, "nfe": fwd + bwd}
        say(
            f"{name:<18}{med['time/step_s']:>16.3f}{med['time/rollout_s']:>11.3f}{med['time/reward_s']:>10.3f}"
            f"{med['time/update_s']:>10.3f}{fwd:>12.0f}{bwd:>12.0f}{fwd + bwd:>12.0f}"
        )
    am, eam, par = out["adjoint_matching"], out["eam"], out["eam_parity"]
    res = {
        "iter_time_ratio_am_over_eam": am["iter_s"] / eam["iter_s"],
        "nfe_ratio_am_over_eam": am["nfe"] / eam["nfe"],
        "iter_time_ratio_am_over_eam_parity": am["iter_s"] / par["iter_s"],
        "nfe_ratio_am_over_eam_parity": am["nfe"] / par["nfe"],
        "am_iter_s": am["iter_s"],
        "eam_iter_s": eam["iter_s"],
        "eam_parity_iter_s": par["iter_s"],
        "am_nfe_per_sample": am["nfe"],
        "eam_nfe_per_sample": eam["nfe"],
        "eam_parity_nfe_per_sample": par["nfe"],
        "ideal_iter_time_ratio_am_over_eam": priced(calls["adjoint_matching"], costs) / priced(calls["eam"], costs),
        "ideal_iter_time_ratio_am_over_eam_parity": (
            priced(calls["adjoint_matching"], costs) / priced(calls["eam_parity"], costs)
        ),
        "calls_per_iteration": {n: describe(c) for n, c in calls.items()},
        "cost_config": args.config,
        "cost_device": str(trainers[names[0]].backbone.device),
        "cost_size": args.size,
        "cost_update_batch": args.update_batch,
    }
    for name in names:
        say(f"{name} calls per iteration (update_batch {args.update_batch}): {describe(calls[name])}")
    say(
        f"AM / EAM: {res['iter_time_ratio_am_over_eam']:.2f}x wall-clock per iteration (ideal "
        f"{res['ideal_iter_time_ratio_am_over_eam']:.2f}x: the calls made, at their measured costs), "
        f"{res['nfe_ratio_am_over_eam']:.2f}x transformer passes; AM / EAM-parity (K_t = 20): "
        f"{res['iter_time_ratio_am_over_eam_parity']:.2f}x "
        f"(ideal {res['ideal_iter_time_ratio_am_over_eam_parity']:.2f}x), "
        f"{res['nfe_ratio_am_over_eam_parity']:.2f}x"
    )
    return res


# -------------------------------------------------------------------------------------------------- 2. toy
def toy_errors(trainer) -> tuple[float, float]:
    bb = trainer.backbone
    x = bb.ode_samples(5000, steps=30, generator=torch.Generator().manual_seed(7))
    mu0, var0 = bb.pretrained_law()
    mu_t, var_t = trainer.reward.tilted_gaussian(mu0, var0, float(trainer.cfg.method.reward_scale))
    return float((x.mean(0) - mu_t).abs().max()), float((x.var(0) - var_t).abs().max())


def bench_toy(args) -> dict:
    say(
        f"\n== 2. Gaussian toy (experiment=toy_eam / toy_am, {args.toy_steps} steps each): reward and distance to "
        f"the analytic tilted target against training wall-clock =="
    )
    out = {}
    for name, exp in (("eam", "toy_eam"), ("adjoint_matching", "toy_am")):
        trainer = make_trainer([f"experiment={exp}", f"trainer.steps={args.toy_steps}"])
        mu0, var0 = trainer.backbone.pretrained_law()
        mu_t, var_t = trainer.reward.tilted_gaussian(mu0, var0, float(trainer.cfg.method.reward_scale))
        y = trainer.reward._target.double().expand(3)
        optimum = float(-0.5 * trainer.reward.gamma * (var_t + (mu_t - y) ** 2).sum())
        say(f"-- {name}: expected reward at the target {optimum:.3f}")
        say(f"{'step':>6}{'wall s':>9}{'reward/mean':>13}{'max|dmean|':>12}{'max|dvar|':>11}")
        hit, hit10, curve = None, None, []
        for step in range(args.toy_steps):
            m = trainer.train_step(step)
            if (step + 1) % args.toy_eval_every == 0 or step == 0:
                dm, dv = toy_errors(trainer)
                wall = m["time/wallclock_s"]
                curve.append((step + 1, wall, m["reward/mean"], dm, dv))
                say(f"{step + 1:>6}{wall:>9.2f}{m['reward/mean']:>13.3f}{dm:>12.4f}{dv:>11.4f}")
                if hit is None and dm < 0.05 and dv < 0.05:
                    hit = wall
                if hit10 is None and dm < 0.1 and dv < 0.1:
                    hit10 = wall
        out[name] = {
            "final_dmean": curve[-1][3],
            "final_dvar": curve[-1][4],
            "wall_s": curve[-1][1],
            "time_to_target_s": hit,
            "time_to_0.1_s": hit10,
            "s_per_iter": curve[-1][1] / args.toy_steps,
        }
        fmt = lambda v: "never" if v is None else f"{v:.2f} s"  # noqa: E731
        say(
            f"   within 0.1 of the target after {fmt(hit10)}, within 0.05 after {fmt(hit)} of training "
            f"({curve[-1][1] / args.toy_steps:.3f} s/iter; batches differ: see conf/experiment/toy_*.yaml)"
        )
    e, a = out["eam"], out["adjoint_matching"]
    res = {
        "toy_eam_final_dmean": e["final_dmean"],
        "toy_eam_final_dvar": e["final_dvar"],
        "toy_am_final_dmean": a["final_dmean"],
        "toy_am_final_dvar": a["final_dvar"],
        "toy_eam_time_to_0.05_s": e["time_to_target_s"],
        "toy_am_time_to_0.05_s": a["time_to_target_s"],
        "toy_eam_time_to_0.1_s": e["time_to_0.1_s"],
        "toy_am_time_to_0.1_s": a["time_to_0.1_s"],
    }
    if e["time_to_0.1_s"] and a["time_to_0.1_s"]:
        res["toy_time_to_0.1_ratio_am_over_eam"] = a["time_to_0.1_s"] / e["time_to_0.1_s"]
    return res


# ------------------------------------------------------------------------------------------------- 3. demo
def pretrained_twin(steps: int) -> dict | None:
    """State dict of the tiny Flux twin's transformer after ``steps`` of flow-matching pre-training: the transformer
    of ``model=tiny_flux_pretrained model.pretrain_steps=<steps>`` (models/tiny_flux_pretrained.py, built once into
    the cache). None for 0 steps (the random-weight twin).

    The twin ships a random transformer, whose velocity is not the flow-matching velocity of any law, so EAM's
    Tweedie terminal score ``(1 - delta)^2 / delta (v_pre((1 - delta) X_1) - X_1)`` is meaningless on it (norm ~1e3
    against ``lambda |grad r|`` ~ 30); the pre-trained one draws colours at random and the colour reward tilts it
    towards the prompt's colour.
    """
    if steps <= 0:
        return None
    from diffusers import FluxTransformer2DModel

    from models.tiny_flux_pretrained import materialize_tiny_flux_pretrained

    folder = materialize_tiny_flux_pretrained(steps=steps)
    return dict(FluxTransformer2DModel.from_pretrained(folder / "transformer").state_dict())


def load_twin(trainer, state: dict | None) -> None:
    if state is None:
        return
    bb = trainer.backbone
    for module in bb.transformer_modules():
        module.load_state_dict(state)


def bench_demo(args) -> dict:
    twin = "flow-matching pre-trained" if args.demo_pretrain_steps > 0 else "random-weight"
    say(
        f"\n== 3. CPU demo (tiny Flux twin, {twin}, reward=color, CPU-demo batch of 32, {args.demo_seconds:.0f} s of "
        f"training each; AM at K = 40): reward/mean against wall-clock =="
    )
    state = pretrained_twin(args.demo_pretrain_steps)
    curves = {}
    for name, ov in (
        ("eam", ["method=eam"]),
        ("adjoint_matching", ["method=adjoint_matching", "method.sampling_steps=40"]),
    ):
        trainer = make_trainer(
            [
                *ov,
                "trainer.steps=100000",
                f"trainer.threads={args.threads}",
                "model.finetune=full",
                *args.demo_overrides,
            ]
        )
        load_twin(trainer, state)
        curve, step = [], 0
        while not curve or curve[-1][0] < args.demo_seconds:
            m = trainer.train_step(step)
            curve.append((m["time/wallclock_s"], m["reward/mean"]))
            step += 1
        curves[name] = curve
        k = max(1, min(5, len(curve) // 4))
        first, last = statistics.mean(r for _, r in curve[:k]), statistics.mean(r for _, r in curve[-k:])
        say(
            f"-- {name}: reward/mean {first:.4f} (first {k} steps) -> {last:.4f} (last {k}); "
            f"{curve[-1][0]:.1f} s wall-clock, {curve[-1][0] / len(curve):.2f} s/iter"
        )
        for w, r in curve[:: max(1, len(curve) // 8)]:
            say(f"   {w:8.1f} s  reward {r:.4f}")

    def reward_at(curve, wall, window=5):
        rows = [r for w, r in curve if w <= wall]
        return statistics.mean(rows[-window:]) if rows else float("nan")

    budget = min(curves["eam"][-1][0], curves["adjoint_matching"][-1][0])
    res = {
        "demo_equal_wallclock_s": budget,
        "demo_eam_reward_at_equal_wallclock": reward_at(curves["eam"], budget),
        "demo_am_reward_at_equal_wallclock": reward_at(curves["adjoint_matching"], budget),
        "demo_eam_reward_start": statistics.mean(r for _, r in curves["eam"][:3]),
        "demo_am_reward_start": statistics.mean(r for _, r in curves["adjoint_matching"][:3]),
        "demo_eam_s_per_iter": curves["eam"][-1][0] / len(curves["eam"]),
        "demo_am_s_per_iter": curves["adjoint_matching"][-1][0] / len(curves["adjoint_matching"]),
    }
    say(
        f"at equal wall-clock ({budget:.1f} s): EAM reward {res['demo_eam_reward_at_equal_wallclock']:.4f}, "
        f"AM reward {res['demo_am_reward_at_equal_wallclock']:.4f} (both started near "
        f"{res['demo_eam_reward_start']:.4f} / {res['demo_am_reward_start']:.4f})"
    )
    return res


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--parts", default="cost,toy,demo", help="comma list of cost, toy, demo")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--prompts", type=int, default=4, help="cost part: prompts per iteration")
    p.add_argument("--group", type=int, default=2, help="cost part: samples per prompt")
    p.add_argument("--finetune", default="lora", choices=["lora", "full"], help="cost part: fine-tuning mode")
    p.add_argument(
        "--update-batch",
        type=int,
        default=40,
        help="cost part: method.update_batch of every method (40: two of AM's 20-row samples per call)",
    )
    p.add_argument("--probe-reps", type=int, default=5, help="cost part: timed calls per kind for the ideal ratio")
    p.add_argument("--config", default="twin", choices=["twin", "tiny", "wide"], help="cost part: transformer (above)")
    p.add_argument("--device", default="auto", help="cost part: model.device (auto: cuda if available)")
    p.add_argument("--size", type=int, default=32, help="cost part: image side in pixels (the twin's default 32)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (1 = robust on shared CPUs)")
    p.add_argument("--toy-steps", type=int, default=150)
    p.add_argument("--toy-eval-every", type=int, default=15)
    p.add_argument("--demo-seconds", type=float, default=150.0, help="demo part: training wall-clock per method")
    p.add_argument(
        "--demo-pretrain-steps",
        type=int,
        default=600,
        help="flow-matching pre-training of the twin's transformer before the demo (0: the random twin)",
    )
    p.add_argument("--demo-overrides", nargs="*", default=[], help="extra overrides for the demo part")
    args = p.parse_args(argv)
    parts = [s.strip() for s in args.parts.split(",") if s.strip()]
    t0 = time.time()
    res: dict = {}
    if "cost" in parts:
        res.update(bench_cost(args))
    if "toy" in parts:
        res.update(bench_toy(args))
    if "demo" in parts:
        res.update(bench_demo(args))
    res["bench_wall_s"] = time.time() - t0
    first = ["iter_time_ratio_am_over_eam", "nfe_ratio_am_over_eam"]
    ordered = {k: res[k] for k in first if k in res} | {k: v for k, v in res.items() if k not in first}
    print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in ordered.items()}), flush=True)
    return res


if __name__ == "__main__":
    main()
