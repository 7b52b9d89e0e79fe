#!/usr/bin/env python
"""GPU check: what rewardflow's GPU work costs on one GPU (sized for an H200), in one command of at most 9 minutes,
for the rare occasions a GPU is at hand; in CI it is rehearsed on the CPU (``--cpu-rehearsal``: the trainer sections,
tests/test_gpu_check_rehearsal.py) and smoke-run whole (``--cpu-smoke``, slow).

The sections (``scripts/gpu_measure/``), most valuable first, each within its share of the 8-minute budget (a
section that would overrun is stopped and marked ``timeout``, one whose share is too small is ``skipped``):

``ceilings``      bf16 matmul TFLOP/s (MFU's denominator), device copy GB/s, host<->device pageable vs pinned
``equality``      (a) the tiny twins train 3 steps on CUDA (fp32, bf16) and on the CPU from one seed: equal within
                  the dtype's tolerance
``trainer``       (b) the trainer: DanceGRPO LoRA and full at FLUX.1's width with as many blocks as the plan fits,
                  720^2 tokens, 3 steps: measured vs planned memory per phase, synchronised seconds, MFU vs the spec
                  peak and vs the matmul ceiling, host syncs, first-update ratios, a DCP save and resume
``families``      FLUX.1-dev, SD3.5-M, Wan2.1-1.3B, Qwen-Image transformers at published size, bf16 weights:
                  forward and forward + backward at batch 1 and batched, checkpointing on and off: seconds,
                  TFLOP/s, MFU (FLOPs counted by torch.utils.flop_counter), peak memory
``fsdp``          FSDP2 on one rank, FLUX.1-dev at full depth: overhead over the plain model, reshard on vs off
``vae``           FLUX.1 VAE decode at 512 px, batches 1 / 8 / 24: time, peak memory
``reward_tower``  open_clip ViT-H-14 image tower at batch 24: forward, forward + backward to the pixels
``bench_jagg``, ``bench_flash``, ``bench_eam``   the method benches' ratios at FLUX.1's block width
``compile``       optional, last: compiled vs eager FLUX blocks

Every measurement is one JSON line in ``<out>/gpu_check.jsonl``, written the moment it is taken (``--out``,
default ``$OUT`` when set, else ``outputs/gpu_check/<UTC time>``); the bench logs go beside it. A summary table is
printed last, after (c): ``<out>/gpu_check.json`` (everything the trainer sections found) and
``<out>/gpu_check_table.md`` (a dated table for the README). The exit code is 0 only when every section ran to the end (``ok``). On the GPU machine, after
``bash scripts/gpu_wheels.sh`` here (docs/gpu_check.md has the device command):

    bash scripts/gpu_run.sh                                  # installs .whl/, then this script: ~8 min
    python3 scripts/gpu_check.py --sections families --families wan2.1 --wan-frames 81
    .venv/bin/python scripts/gpu_check.py --cpu-rehearsal    # ceilings, equality, trainer on the CPU (~1 min)
    .venv/bin/python scripts/gpu_check.py --cpu-smoke        # every section on the CPU at toy sizes (several min)
"""

from __future__ import annotations

import time

T0 = time.monotonic()  # the budget counts from here: imports are part of it

import argparse  # noqa: E402
import datetime  # noqa: E402
import importlib.metadata  # noqa: E402
import importlib.util  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Callable  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
os.environ.update(
    HF_HUB_OFFLINE="1",
    TRANSFORMERS_OFFLINE="1",
    WANDB_MODE="disabled",
    HF_HUB_DISABLE_PROGRESS_BARS="1",
    TOKENIZERS_PARALLELISM="false",
)

import torch  # noqa: E402

from gpu_measure.benches import section_bench  # noqa: E402
from gpu_measure.ceilings import section_ceilings  # noqa: E402
from gpu_measure.compiled import section_compile  # noqa: E402
from gpu_measure.equality import section_equality  # noqa: E402
from gpu_measure.families import section_families  # noqa: E402
from gpu_measure.fsdp import section_fsdp  # noqa: E402
from gpu_measure.guard import SectionRunner  # noqa: E402
from gpu_measure.profile import FAMILY_NAMES, GPU, REHEARSAL, SECTIONS, SMOKE, Check  # noqa: E402
from gpu_measure.record import Recorder, summary_table  # noqa: E402
from gpu_measure.reward_path import section_reward_tower, section_vae  # noqa: E402
from gpu_measure.trainer_report import write_report  # noqa: E402
from gpu_measure.trainer_width import section_trainer  # noqa: E402

# packages the check needs that may travel as wheels: their versions and where they were found, read without
# importing them (a missing one is reported here and fails only the section that needs it)
REPORTED_PACKAGES = (
    "torch",
    "diffusers",
    "transformers",
    "huggingface-hub",
    "hydra-core",
    "omegaconf",
    "antlr4-python3-runtime",
    "open_clip_torch",
    "ftfy",
    "numpy",
)
MODULE_OF = {
    "huggingface-hub": "huggingface_hub",
    "hydra-core": "hydra",
    "antlr4-python3-runtime": "antlr4",
    "open_clip_torch": "open_clip",
}


def say(msg: str) -> None:
    print(msg, flush=True)


def _package(name: str) -> dict:
    try:
        version = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        version = None
    spec = importlib.util.find_spec(MODULE_OF.get(name, name))
    where = None if spec is None or not spec.origin else str(Path(spec.origin).parent.parent)
    return {"version": version, "from": where}


def _nccl_version() -> str | None:
    try:
        v = torch.cuda.nccl.version()
    except (AttributeError, RuntimeError):
        return None
    return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)


def env_report(device: torch.device) -> dict:
    out = {
        "python": platform.python_version(),
        "torch_cuda_build": torch.version.cuda,
        "cpu_cores": os.cpu_count(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "pythonpath": os.environ.get("PYTHONPATH"),
        "packages": {n: _package(n) for n in REPORTED_PACKAGES},
    }
    if device.type != "cuda":
        return {**out, "device": "cpu"}
    props = torch.cuda.get_device_properties(device)
    free, total = torch.cuda.mem_get_info(device)
    out.update(
        device=props.name,
        capability=f"{props.major}.{props.minor}",
        device_count=torch.cuda.device_count(),
        total_gib=round(total / 2**30, 2),
        free_gib=round(free / 2**30, 2),
        multiprocessors=props.multi_processor_count,
        cudnn=torch.backends.cudnn.version(),
        nccl=_nccl_version(),
        sdpa={
            "flash": torch.backends.cuda.flash_sdp_enabled(),
            "mem_efficient": torch.backends.cuda.mem_efficient_sdp_enabled(),
            "cudnn": torch.backends.cuda.cudnn_sdp_enabled(),
        },
    )
    try:  # the driver is not visible through torch
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version,clocks.sm,clocks.max.sm,power.draw", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        out["nvidia_smi"] = smi.stdout.strip() if smi.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        out["nvidia_smi"] = None
    return out


def default_out() -> Path:
    if os.environ.get("OUT"):
        return Path(os.environ["OUT"])
    return ROOT / "outputs" / "gpu_check" / datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d_%H%M%S")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cpu-smoke", action="store_true", help="every section on the CPU at toy sizes")
    p.add_argument(
        "--cpu-rehearsal",
        action="store_true",
        help="the trainer sections (ceilings, equality, trainer, report) on the CPU at tiny sizes: what CI runs",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="folder for gpu_check.jsonl and the bench logs (default: $OUT, else outputs/gpu_check/<time>)",
    )
    p.add_argument("--budget-s", type=float, default=None, help="whole-check budget (default 480; smoke 240)")
    p.add_argument("--sections", default=None, help=f"comma list of {', '.join(SECTIONS)} (default: the profile's)")
    p.add_argument("--families", default=",".join(FAMILY_NAMES), help="families section: comma list of families")
    p.add_argument("--wan-frames", type=int, default=None, help="families section: Wan2.1 frames (4k + 1; default 33)")
    p.add_argument("--reps", type=int, default=None, help="timed repetitions per measurement, at most")
    args = p.parse_args(argv)

    profile = REHEARSAL if args.cpu_rehearsal else SMOKE if args.cpu_smoke else GPU
    chosen = args.sections if args.sections is not None else ",".join(profile.default_sections)
    sections = [s.strip() for s in chosen.split(",") if s.strip()]
    families = [f.strip() for f in args.families.split(",") if f.strip()]
    unknown = sorted(set(sections) - set(SECTIONS)) + sorted(set(families) - set(FAMILY_NAMES))
    if unknown:
        p.error(
            f"unknown section or family: {', '.join(unknown)} (sections: {', '.join(SECTIONS)}; families: "
            f"{', '.join(FAMILY_NAMES)})"
        )
    if args.wan_frames is not None and (args.wan_frames < 1 or (args.wan_frames - 1) % 4):
        p.error(f"--wan-frames must be 4k + 1 (1, 5, ..., 81), got {args.wan_frames}")
    if profile.device == "cuda" and not torch.cuda.is_available():
        print(
            f"gpu_check: no CUDA device (torch {torch.__version__}, CUDA build {torch.version.cuda}, "
            f"torch.cuda.is_available() is False): run it on a GPU machine, or pass --cpu-rehearsal (the trainer "
            f"sections) or --cpu-smoke (every section) for the CPU run",
            file=sys.stderr,
        )
        return 2
    budget = args.budget_s if args.budget_s is not None else profile.budget_s
    device = torch.device(profile.device)
    if device.type == "cuda":  # an explicit index: NCCL's device_id and set_device need one
        device = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(device)
    out_dir = args.out or default_out()
    out_dir.mkdir(parents=True, exist_ok=True)
    chk = Check(profile, device, families, args.wan_frames, args.reps or profile.reps, out_dir)
    rec = Recorder(out_dir, T0, echo=say)

    say(f"gpu_check: profile {profile.name}, budget {budget:.0f} s, writing {rec.path}")
    env = env_report(device)
    rec.write(
        "env", "environment", **env, torch=torch.__version__, value=f"torch {torch.__version__} on {env['device']}"
    )
    runner = SectionRunner(
        budget, sections, {s: profile.weights[s] for s in sections}, {s: profile.minimum[s] for s in sections}, start=T0
    )
    bodies: dict[str, Callable[[float], None]] = {
        "ceilings": lambda a: section_ceilings(chk, rec, a),
        "equality": lambda a: section_equality(chk, rec, a),
        "trainer": lambda a: section_trainer(chk, rec, a),
        "families": lambda a: section_families(chk, rec, a),
        "fsdp": lambda a: section_fsdp(chk, rec, a),
        "vae": lambda a: section_vae(chk, rec, a),
        "reward_tower": lambda a: section_reward_tower(chk, rec, a),
        **{b: (lambda a, b=b: section_bench(chk, rec, b, a)) for b in ("bench_jagg", "bench_flash", "bench_eam")},
        "compile": lambda a: section_compile(chk, rec, a),
    }
    statuses = {}
    for name in sections:
        say(f"[{name}] start ({runner.share(name):.0f} s allowed)")
        res = runner.run(name, bodies[name])
        statuses[name] = res["status"]
        rec.write(name, "section", **res)
    ok = all(s == "ok" for s in statuses.values())
    rec.write(
        "check",
        "whole check",
        status="ok" if ok else "incomplete",
        profile=profile.name,
        budget_s=budget,
        sections=statuses,
        out=str(out_dir),
    )
    ceilings = {
        x["label"]: x.get("tflops") or x.get("gb_per_s")
        for x in rec.lines
        if x["section"] == "ceilings" and x["label"] != "section"
    }
    write_report(
        out_dir,
        {
            "command": "python scripts/gpu_check.py" + (f" --{profile.name}" if profile is not GPU else ""),
            "profile": profile.name,
            "device": env["device"],
            "env": env,
            "sections": statuses,
            "ceilings": ceilings,
            **chk.report,
        },
    )
    say("\n" + summary_table(rec.lines))
    say(
        f"\ngpu_check: {'every section ok' if ok else 'not every section ok'}; "
        f"{time.monotonic() - T0:.0f} s; lines in {rec.path}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # no interpreter shutdown: compile workers, NCCL or CUDA teardown must not hold the device command past its limit
    os._exit(code)
