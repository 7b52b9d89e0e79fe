"""Memory of start-up, rollout and update, measured side by side with today's paths, and the planner's error
(docs/memory.md#measured). Not a test: figures depend on the machine. The last line is one JSON object.

    .venv/bin/python scripts/bench_memory.py                    # CPU, two gloo ranks (~15 min on 2 busy cores)
    .venv/bin/python scripts/bench_memory.py --device cuda      # one GPU per rank

**How it measures** (scripts/memory_probe.py): on the CPU, a phase's figure is the peak of the process's anonymous
resident memory during the phase (sampled every millisecond; file pages of memory-mapped weights do not count) minus
its value just before the phase, after imports; with ``--device cuda``, ``max_memory_allocated`` likewise. The
script re-executes itself with ``MALLOC_MMAP_THRESHOLD_=65536`` so freed tensors leave the process.

**Models.** Start-up and update: a FLUX.1 architecture at the published block width (24 heads x 128, T5 width 32 of
the twin's text encoder) with ``--double`` double and ``--single`` single blocks, weights written once in bf16 as
the real checkpoint is; weights dominate its memory. Rollout: the tiny FLUX twin at ``--rollout-size`` pixels, where
the transformer's and the VAE's activations, not the 0.1 M weights, dominate the phase.

Keys of the JSON line:

* ``startup_peak_per_rank_over_full_model``: the largest per-rank increase while the trainer builds and shards the
  model (full fine-tuning, no reference) over the fp32 size of the whole transformer; ideal ``1 / world_size``.
  ``..._today``: the same with each rank loading the whole model and then sharding it (the single-process path).
* ``startup_peak_with_reference_over_full_model``: with a KL reference kept (bf16); ideal ``1.5 / world_size``.
* ``startup_peak_lora_over_full_model``: LoRA start-up (frozen base in the compute dtype, fp32 on the CPU).
* ``rollout_peak_ratio_64_over_8``: the rollout + decode + reward phase's increase at 64 samples per rank over 8, with
  ``rollout_chunk=8`` and ``decode_chunk=8``, the kept trajectory states excluded; ``..._today``: one call over all
  samples (``rollout_chunk`` and ``decode_chunk`` = the batch), as today's code. One process (the phase is
  rank-local).
* ``planner_rel_error``: |planned - measured| / measured for the update phase (LoRA, one micro-batch per backward)
  of the start-up model on ``world_size`` ranks, measured over the memory after imports.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from memory_probe import MALLOC_ENV, PeakProbe, malloc_env, rss_anon  # noqa: E402

PROMPTS = ["a red square", "a photo of a blue circle", "a green tree", "a pink car"]


# ------------------------------------------------------------------------------------------------- the models
def wide_flux_folder(double: int, single: int) -> Path:
    """The FLUX-architecture twin at published width, transformer stored in bf16 (written once into the cache)."""
    import torch

    from models.tiny_flux import WIDE_TRANSFORMER, build_tiny_flux_pipeline
    from models.twins import materialize, recipe_key

    config = dict(WIDE_TRANSFORMER, num_layers=double, num_single_layers=single)

    def build():
        pipe = build_tiny_flux_pipeline(0, pretrain_steps=0, transformer=config)
        pipe.transformer.to(torch.bfloat16)
        return pipe

    return materialize("bench_memory_flux", recipe_key("bench_memory", 1, config), build)


def compose(overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from launcher.config import register_configs

    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return hydra_compose(config_name="train", overrides=overrides)


def run_config(folder: Path, device: str, extra: list[str]) -> list[str]:
    return [
        "model=tiny_flux",
        f"model.path={folder}",
        "model.height=256",
        "model.width=256",
        "model.max_sequence_length=64",
        f"model.device={device}",
        "logger=none",
        "method=flash_grpo",
        "method.group_size=2",
        "method.prompts_per_step=2",
        "method.sampling_steps=2",
        "method.update_batch=2",
        "method.updates_per_rollout=1",
        "method.sde_index_pool=[0]",
        "trainer.threads=1",
        "trainer.export=false",
        "trainer.sample_every=0",
        *extra,
    ]


# ------------------------------------------------------------------------------------------------ the phases
def rank_main(rank: int, world: int, port: int, device: str, folder: str, case: str, out: str) -> None:
    """One rank: build the trainer (start-up), then for ``update`` run one step's phases."""
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank)
    )
    import torch
    from omegaconf import OmegaConf

    import models.sharded_load as sharded_load
    from launcher.plan.memory_plan import plan
    from launcher.train.trainer import RunInfo, Trainer

    extra = {
        "full": ["model.finetune=full"],
        "today": ["model.finetune=full"],
        "reference": ["model.finetune=full", "method.kl_beta=0.01", "model.reference_dtype=bfloat16"],
        "lora": ["model.finetune=lora"],
        "update": ["model.finetune=lora"],
    }[case]
    if case == "today":  # each rank loads the whole model (the single-process path), then shards it
        sharded_load.sharded_startup_enabled = lambda: False
    cfg = compose(run_config(Path(folder), device, extra))
    base = rss_anon() if device == "cpu" else 0
    with tempfile.TemporaryDirectory() as tmp:
        with PeakProbe(device) as startup:
            trainer = Trainer(cfg, RunInfo(run_dir=Path(tmp)))
        trainer.method.keep_images = trainer.samples_due(1)  # as in training: no image grid, no 8-bit copies kept
        result = {"startup": startup.increase}
        if case == "update":
            method, gen = trainer.method, torch.Generator().manual_seed(rank)
            resident = (lambda: rss_anon() - base) if device == "cpu" else torch.cuda.memory_allocated
            result["resident_after_startup"] = resident()
            rollout = method.rollout(trainer.data.batch(0, 2)[rank::world], gen)
            method.score(rollout, trainer.reward)
            result["resident_before_update"] = resident()
            with PeakProbe(device) as update:
                method.prepare_update(rollout)
                trainer.updates.run(rollout, gen)
            result["update"] = update.peak - (base if device == "cpu" else 0)
            result["planned_update"] = plan(OmegaConf.to_container(cfg, resolve=True), world).phase("update")
    Path(out, f"{case}-{rank}.json").write_text(json.dumps(result))


def spawn(world: int, device: str, folder: Path, case: str, out: str) -> list[dict]:
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(
        rank_main, args=(world, port, device, str(folder), case, out), nprocs=world, join=True, start_method="spawn"
    )
    return [json.loads(Path(out, f"{case}-{r}.json").read_text()) for r in range(world)]


def full_transformer_bytes(folder: Path) -> int:
    from models.param_inventory import flux

    config = json.loads((folder / "transformer" / "config.json").read_text())
    return flux(config).params * 4


def rollout_peak(samples: int, chunk: int, size: int, device: str) -> tuple[int, int]:
    """(peak increase of rollout + decode + reward, bytes of the kept trajectory states), one process."""
    import torch

    from launcher.train.trainer import RunInfo, Trainer

    cfg = compose(
        [
            "model=tiny_flux",
            f"model.height={size}",
            f"model.width={size}",
            f"model.device={device}",
            "logger=none",
            "method=flow_grpo",
            f"method.group_size={samples}",
            "method.prompts_per_step=1",
            "method.sampling_steps=3",
            "method.timestep_fraction=0.34",
            f"method.rollout_chunk={chunk}",
            f"method.decode_chunk={chunk}",
            "trainer.threads=1",
            "trainer.sample_every=0",
        ]
    )
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer(cfg, RunInfo(run_dir=Path(tmp)))
        trainer.method.keep_images = trainer.samples_due(1)  # as in training: no image grid, no 8-bit copies kept
        trainer.method.rollout(PROMPTS[:1], torch.Generator().manual_seed(1))  # warm-up: caches, lazy inits
        with PeakProbe(device) as probe:
            rollout = trainer.method.rollout(PROMPTS[:1], torch.Generator().manual_seed(0))
            trainer.method.score(rollout, trainer.reward)
        return probe.increase, rollout.latents.nbytes


def rollout_case(samples: int, chunk: int | None, size: int, device: str, out: str) -> int:
    """In a fresh process, so earlier phases leave nothing behind."""
    import subprocess

    code = (
        f"import sys, json; sys.path[:0] = [{str(ROOT)!r}, {str(ROOT / 'scripts')!r}]; import bench_memory as b; "
        f"print(json.dumps(b.rollout_peak({samples}, {chunk or samples}, {size}, {device!r})))"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=malloc_env(), check=True)
    peak, traj = json.loads(res.stdout.strip().splitlines()[-1])
    return peak - traj


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--double", type=int, default=1, help="double-stream blocks of the start-up model")
    p.add_argument("--single", type=int, default=2, help="single-stream blocks of the start-up model")
    p.add_argument("--rollout-size", type=int, default=384, help="image side of the rollout phase, in pixels")
    p.add_argument("--skip-today", action="store_true", help="do not measure today's paths (saves memory)")
    p.add_argument(
        "--phases",
        default="startup,update,rollout",
        help="which of startup, update, rollout to measure (the JSON then has only their keys)",
    )
    args = p.parse_args()
    if any(os.environ.get(k) != v for k, v in MALLOC_ENV.items()):
        os.execve(sys.executable, [sys.executable, *sys.argv], malloc_env())
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    t0 = time.perf_counter()
    folder = wide_flux_folder(args.double, args.single)
    full = full_transformer_bytes(folder)
    out: dict = {
        "world_size": args.world_size,
        "device": args.device,
        "startup_model_params": full // 4,
        "rollout_size_px": args.rollout_size,
    }
    phases = set(args.phases.split(","))
    with tempfile.TemporaryDirectory() as tmp:
        cases = (
            ["full", "reference", "lora"] + ([] if args.skip_today else ["today"]) if "startup" in phases else []
        ) + (["update"] if "update" in phases else [])
        for case in cases:
            ranks = spawn(args.world_size, args.device, folder, case, tmp)
            if case != "update":
                out[f"startup_{case}"] = max(r["startup"] for r in ranks) / full
                print(json.dumps({case: out[f"startup_{case}"]}), flush=True)
            else:
                measured = max(r["update"] for r in ranks)
                planned = ranks[0]["planned_update"]
                out.update(
                    update_resident_after_startup_gib=ranks[0]["resident_after_startup"] / 2**30,
                    update_resident_before_update_gib=ranks[0]["resident_before_update"] / 2**30,
                    update_measured_gib=measured / 2**30,
                    update_planned_gib=planned / 2**30,
                    planner_rel_error=abs(planned - measured) / measured,
                )
                print(json.dumps({"planner_rel_error": out["planner_rel_error"]}), flush=True)
        if "rollout" in phases:
            small = rollout_case(8, 8, args.rollout_size, args.device, tmp)
            large = rollout_case(64, 8, args.rollout_size, args.device, tmp)
            out.update(
                rollout_peak_8_gib=small / 2**30,
                rollout_peak_64_gib=large / 2**30,
                rollout_peak_ratio_64_over_8=large / small,
            )
        if "rollout" in phases and not args.skip_today:
            today_small = rollout_case(8, None, args.rollout_size, args.device, tmp)
            today_large = rollout_case(64, None, args.rollout_size, args.device, tmp)
            out["rollout_peak_ratio_64_over_8_today"] = today_large / today_small
    startup = {
        "startup_peak_per_rank_over_full_model": "startup_full",
        "startup_peak_with_reference_over_full_model": "startup_reference",
        "startup_peak_lora_over_full_model": "startup_lora",
    }
    result = {
        "world_size": out["world_size"],
        "device": out["device"],
        **{key: out[name] for key, name in startup.items() if name in out},
        **({"startup_peak_per_rank_over_full_model_today": out["startup_today"]} if "startup_today" in out else {}),
        **{k: v for k, v in out.items() if k.startswith(("rollout_", "planner_", "update_"))},
        "startup_model_params": out["startup_model_params"],
        "seconds": round(time.perf_counter() - t0),
    }
    print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in result.items()}))


if __name__ == "__main__":
    main()
