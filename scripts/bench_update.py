"""Speed of the update phase with batched trained steps, measured side by side on 2 FSDP2 ranks.

Two processes (gloo on the CPU; NCCL with ``--device cuda``, one GPU per rank) run the real trainer
(launcher/train/trainer.py) with DanceGRPO on a FLUX.1 transformer at FLUX.1-dev's published block width (24 heads x 128
= 3072, its MLP ratio and modulation; ``--double`` / ``--single`` blocks, 1 + 1 by default) on the tiny twin's text
encoders and VAE, LoRA r32 on the attention projections as conf/model/flux.yaml. Every round trains the same step
twice, once with ``method.update_batch=8`` (the step's trained rows packed 8 per transformer call) and once with
``update_batch=1`` (one call per row, the old micro-batch 1), in alternating order: same prompts, same noise, same
trained rows, the same gradient up to float rounding (tests/test_update_batch.py). Under FSDP2 each call gathers
every block's weights in the forward and again in the backward, which batching pays once per 8 rows.

Measured per round, on rank 0 (the ranks run in lockstep): the update phase's wall-clock time (``time/update_s``:
advantages, backward calls, clipping, optimizer step), the transformer calls during it, and the host syncs per
optimizer update (launcher/train/host_syncs.py). Then, unless ``--no-compile``, the same trainer is rebuilt with
``model.compile=true`` (each block compiled in place) and the update at ``update_batch=8`` is timed eager vs compiled
(``compile_speedup`` = eager / compiled; the first compiled steps, which compile, are not timed). Ratios are medians
over rounds of the round's paired ratio. The last output line is one JSON object.

    .venv/bin/python scripts/bench_update.py                   # 2 CPU ranks, 1 + 1 blocks, 16 + 16 tokens
    .venv/bin/python scripts/bench_update.py --no-compile --rounds 2
    .venv/bin/python scripts/bench_update.py --device cuda --ranks 1 --double 2 --single 4 --size 512
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import socket
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_SILENT", "true")

import torch  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from flux_bench_models import CONFIGS  # noqa: E402
from launcher.config import compose  # noqa: E402

BATCHED, ROWWISE = 8, 1


def model_folder(config: str, double: int, single: int) -> Path:
    """FLUX.1-dev's block width (``wide``; ``tiny``: the twin's, for a quick smoke run) at the chosen depth
    (scripts/flux_bench_models.py)."""
    from flux_bench_models import model_folder as folder

    return folder(config, num_layers=double, num_single_layers=single)


class UpdateProbe:
    """Wraps the trainer's update loop: transformer calls and host syncs while it runs."""

    def __init__(self, trainer):
        from launcher.train.host_syncs import HostSyncCounter

        self.trainer, self.calls, self.syncs, self.updates = trainer, 0, 0, 0
        run = trainer.updates.run
        trainer.backbone.transformer.register_forward_hook(lambda *a: setattr(self, "calls", self.calls + 1))

        def probed(rollout, generator):
            plan_len = int(trainer.method.cfg.updates_per_rollout)
            self.calls = 0
            with HostSyncCounter() as counter:
                out = run(rollout, generator)
            self.syncs, self.updates = counter.total, plan_len
            return out

        trainer.updates.run = probed


def train_round(trainer, probe, step: int, update_batch: int) -> dict:
    trainer.method.cfg.update_batch = update_batch
    metrics = trainer.train_step(step)
    return {
        "update_s": metrics["time/update_s"],
        "step_s": metrics["time/step_s"],
        "calls": probe.calls,
        "syncs_per_update": probe.syncs / max(1, probe.updates),
        "bwd_rows": metrics["count/transformer_bwd"],
        "grad_norm": metrics.get("grad_norm", float("nan")),
    }


def worker(rank: int, world: int, port: int, args, folder: str, out_dir: str) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world),
    )
    result: dict = {}
    try:
        from launcher.train.trainer import RunInfo, Trainer

        overrides = [
            "logger=none",
            "method=dance_grpo",
            "model=tiny_flux",
            f"model.path={folder}",
            f"model.device={args.device}",
            f"model.height={args.size}",
            f"model.width={args.size}",
            "model.max_sequence_length=16",
            "model.finetune=lora",
            "model.lora_rank=32",
            "model.lora_alpha=64",
            f"model.activation_checkpointing={args.activation_checkpointing}",
            "trainer.sample_every=0",
            "trainer.progress=false",
            f"trainer.threads={args.threads}",
            "trainer.export=false",
            f"method.group_size={args.group}",
            f"method.prompts_per_step={world}",
            f"method.sampling_steps={args.sampling_steps}",
            f"method.timestep_fraction={args.fraction}",
            "method.updates_per_rollout=1",
            "optimizer.lr=1e-6",
        ]
        run_dir = Path(out_dir) / "run"
        trainer = Trainer(compose(overrides), RunInfo(run_dir=run_dir))
        probe = UpdateProbe(trainer)
        rounds = []
        for r in range(args.warmup + args.rounds):
            order = (BATCHED, ROWWISE) if r % 2 == 0 else (ROWWISE, BATCHED)
            row = {ub: train_round(trainer, probe, r, ub) for ub in order}
            if rank == 0:
                print(
                    f"round {r}{' (warm-up)' if r < args.warmup else ''}: "
                    + ", ".join(
                        f"update_batch={ub}: update {row[ub]['update_s']:.2f} s, {row[ub]['calls']} calls"
                        for ub in order
                    ),
                    flush=True,
                )
            if r >= args.warmup:
                rounds.append(row)
        result.update(
            rounds=rounds,
            params=sum(p.numel() for p in trainer.backbone.transformer.parameters()),
            trainable=sum(p.numel() for p in trainer.params),
            image_tokens=trainer.backbone.latent_shape[0],
        )
        if not args.no_compile:
            from models.compiled_blocks import compile_unavailable_reason

            reason = compile_unavailable_reason(trainer.backbone.device)
            if reason is not None:
                result["compile"] = {"unavailable": reason}
            else:  # eager at the compiled run's steps, then the eager trainer makes room for the compiled one
                eager_s = [_update_s(trainer, 100 + args.compile_warmup + r) for r in range(args.compile_rounds)]
                del trainer, probe
                gc.collect()
                try:
                    result["compile"] = {
                        "eager_update_s": eager_s,
                        **compiled_update_times(overrides, run_dir, args, rank),
                    }
                except Exception as e:  # noqa: BLE001 - reported in the JSON instead of the speedup
                    result["compile"] = {"unavailable": f"compilation failed: {type(e).__name__}: {e}"[:500]}
    except BaseException:  # noqa: BLE001 - reported by the parent
        result["error"] = traceback.format_exc()
    torch.save(result, os.path.join(out_dir, f"rank{rank}.pt"))


def compiled_update_times(overrides: list[str], run_dir: Path, args, rank: int) -> dict:
    """Update time at update_batch=8 of the trainer rebuilt with ``model.compile=true``, after the compiling steps."""
    from launcher.train.trainer import RunInfo, Trainer

    compiled = Trainer(compose([*overrides, "model.compile=true"]), RunInfo(run_dir=run_dir.with_name("compiled")))
    UpdateProbe(compiled)  # the same instrumentation as the eager trainer
    t0 = time.perf_counter()
    for r in range(args.compile_warmup):  # these steps compile (each new row count)
        _update_s(compiled, 100 + r)
    warmup_s = time.perf_counter() - t0
    compiled_s = [_update_s(compiled, 100 + args.compile_warmup + r) for r in range(args.compile_rounds)]
    if rank == 0:
        print(f"compiled: warm-up {warmup_s:.1f} s, update {statistics.median(compiled_s):.2f} s", flush=True)
    return {"compiled_update_s": compiled_s, "warmup_s": warmup_s}


def _update_s(trainer, step: int) -> float:
    trainer.method.cfg.update_batch = BATCHED
    return trainer.train_step(step)["time/update_s"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=2, help="FSDP2 ranks (processes)")
    ap.add_argument(
        "--config",
        choices=("wide", "tiny"),
        default="wide",
        help="block width: FLUX.1-dev's (wide) or the tiny twin's (a quick smoke run)",
    )
    ap.add_argument("--double", type=int, default=1, help="double-stream blocks (FLUX.1-dev: 19)")
    ap.add_argument("--single", type=int, default=1, help="single-stream blocks (FLUX.1-dev: 38)")
    ap.add_argument(
        "--size",
        type=int,
        default=16,
        help="image side in pixels (the twin's VAE halves it, packing 2x2: 16 -> 16 image tokens)",
    )
    ap.add_argument("--group", type=int, default=2, help="samples per prompt (one prompt per rank)")
    ap.add_argument("--sampling-steps", type=int, default=6)
    ap.add_argument(
        "--fraction",
        type=float,
        default=0.8,
        help="DanceGRPO timestep_fraction: floor(fraction x (steps - 1)) trained steps per sample",
    )
    ap.add_argument("--rounds", type=int, default=3, help="measured rounds (each: one step per update_batch)")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    ap.add_argument("--activation-checkpointing", default="none", help="model.activation_checkpointing")
    ap.add_argument("--no-compile", action="store_true", help="skip the compiled-blocks measurement")
    ap.add_argument("--compile-warmup", type=int, default=2, help="compiled steps run before timing")
    ap.add_argument("--compile-rounds", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="model.device: cpu or cuda")
    args = ap.parse_args()

    folder = str(model_folder(args.config, args.double, args.single))
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory() as out_dir:
        ctx = mp.start_processes(
            worker,
            args=(args.ranks, free_port(), args, folder, out_dir),
            nprocs=args.ranks,
            join=True,
            start_method="spawn",
        )
        del ctx
        results = [torch.load(os.path.join(out_dir, f"rank{r}.pt"), weights_only=False) for r in range(args.ranks)]
    for r, res in enumerate(results):
        if "error" in res:
            raise SystemExit(f"rank {r} failed:\n{res['error']}")
    res = results[0]
    rounds = res["rounds"]

    def paired(key: str) -> float:
        return statistics.median(row[BATCHED][key] / row[ROWWISE][key] for row in rounds)

    med = {ub: {k: statistics.median(row[ub][k] for row in rounds) for k in rounds[0][ub]} for ub in (BATCHED, ROWWISE)}
    out = {
        "update_time_ratio_batched_over_rowwise": paired("update_s"),
        "transformer_calls_ratio": med[BATCHED]["calls"] / med[ROWWISE]["calls"],
        "host_syncs_per_update": max(row[ub]["syncs_per_update"] for row in rounds for ub in row),
        "step_time_ratio_batched_over_rowwise": paired("step_s"),
        "backward_rows_ratio": med[BATCHED]["bwd_rows"] / med[ROWWISE]["bwd_rows"],
        "batched": med[BATCHED],
        "rowwise": med[ROWWISE],
    }
    comp = res.get("compile")
    if comp is None:
        out.update(compile_speedup=1.0, compile_note="not measured (--no-compile)")
    elif "unavailable" in comp:
        out.update(compile_speedup=1.0, compile_note=f"compile unavailable: {comp['unavailable']}")
    else:
        speedup = statistics.median(comp["eager_update_s"]) / statistics.median(comp["compiled_update_s"])
        out.update(compile_speedup=speedup, compile_warmup_s=comp["warmup_s"], compile=comp)
    blocks = CONFIGS[args.config]
    width = blocks["num_attention_heads"] * blocks["attention_head_dim"]
    out["config"] = {
        "ranks": args.ranks,
        "double": args.double,
        "single": args.single,
        "width": width,
        "params": res["params"],
        "trainable": res["trainable"],
        "size": args.size,
        "image_tokens": res["image_tokens"],
        "text_tokens": 16,
        "group": args.group,
        "sampling_steps": args.sampling_steps,
        "fraction": args.fraction,
        "rounds": args.rounds,
        "threads": args.threads,
        "device": args.device,
        "activation_checkpointing": args.activation_checkpointing,
        "wall_s": time.perf_counter() - t_start,
    }
    print()
    print(
        f"FLUX.1 width {width}, {args.double} double + {args.single} single blocks ({res['params'] / 1e6:.0f} M "
        f"params, LoRA {res['trainable'] / 1e6:.2f} M), {args.size}x{args.size}, {args.ranks} FSDP2 rank(s)"
    )
    print(
        f"update phase: batched {med[BATCHED]['update_s']:.2f} s ({med[BATCHED]['calls']:.0f} calls) vs "
        f"row-at-a-time {med[ROWWISE]['update_s']:.2f} s ({med[ROWWISE]['calls']:.0f} calls): time ratio "
        f"{out['update_time_ratio_batched_over_rowwise']:.3f} (target <= 0.85), calls ratio "
        f"{out['transformer_calls_ratio']:.3f} (target <= 0.2); host syncs per update "
        f"{out['host_syncs_per_update']:.1f} (target <= 3); compile speedup {out['compile_speedup']:.2f}"
    )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
