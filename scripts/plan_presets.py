"""The memory plan of every preset in conf/experiment/ and of each family at its published size, on a cluster of GPUs
(default 8 x 80 GB), as the Markdown table of docs/memory.md and the README (`--tables` adds each full plan).

    .venv/bin/python scripts/plan_presets.py                     # 8 x 80 GB
    .venv/bin/python scripts/plan_presets.py --gpus 8 --gpu-mem-gb 80 --tables

Each row is ``rewardflow <row's overrides> cluster=slurm cluster.gpus_per_node=8 --plan``; no weights are read.
"+ DanceGRPO x 8 GPUs" stands for the overrides in ``RECIPE``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: DanceGRPO's scale on 8 GPUs (2 prompts x 12 generations per GPU, one sample per backward, 16 steps), instead of
#: conf/train.yaml's CPU-demo sizes
RECIPE = [
    "method=dance_grpo",
    "method.group_size=12",
    "method.prompts_per_step=16",
    "method.update_batch=2",
    "method.sampling_steps=16",
]
#: each family at its published size (conf/model/<name>.yaml: LoRA), full fine-tuning where the papers use it, and
#: the preset that names no model with the models its recipe was run on
FAMILIES = [
    ["model=flux", *RECIPE],
    ["model=flux", "model.finetune=full", *RECIPE],
    ["model=sd35m", *RECIPE],
    ["model=qwenimage", *RECIPE],
    ["model=qwenimage", "model.finetune=full", *RECIPE],
    ["model=wan2.1", *RECIPE],
    ["model=wan2.1", "model.path=Wan-AI/Wan2.1-T2V-14B-Diffusers", *RECIPE],
    ["experiment=jagg_paper", "model=flux"],
    ["experiment=jagg_paper", "model=qwenimage", "model.finetune=full"],
]


def rows(gpus: int, mem: float) -> list[tuple[str, object, float]]:
    from launcher.plan.cli import compose_runs
    from launcher.plan.fixes import plan_with_fixes

    presets = sorted(p.stem for p in (ROOT / "conf" / "experiment").glob("*.yaml"))
    out = []
    for overrides in [[f"experiment={p}"] for p in presets] + FAMILIES:
        t0 = time.perf_counter()
        ((_, cfg),) = compose_runs(
            [*overrides, "cluster=slurm", f"cluster.gpus_per_node={gpus}", f"cluster.gpu_mem_gb={mem}"]
        )
        out.append((" ".join(overrides), plan_with_fixes(cfg), time.perf_counter() - t0))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--gpu-mem-gb", type=float, default=80.0)
    p.add_argument("--tables", action="store_true", help="also print each run's full plan")
    args = p.parse_args()
    from launcher.plan.memory_plan import GiB

    results = rows(args.gpus, args.gpu_mem_gb)
    print(
        f"| run (+ cluster=slurm cluster.gpus_per_node={args.gpus}) | model | activation checkpointing | "
        f"rollout GiB | update GiB | on {args.gpus} x {args.gpu_mem_gb:g} GB |"
    )
    print("| --- | --- | --- | ---: | ---: | --- |")
    for name, result, _ in results:
        if result is None:
            print(f"| `{name}` | SOC toy | - | - | - | nothing to plan (CPU toy) |")
            continue
        verdict = "fits" if result.fits else "does not fit; fix: " + " / ".join(result.fixes[:2])
        model = result.run.split(" model=")[1].split(" (")[0]
        name = name.replace(" ".join(RECIPE), "+ DanceGRPO x 8 GPUs")
        # the auto setting the plan decided (launcher/plan/choices.py), or the one the config sets
        auto = result.choices.get("model.activation_checkpointing")
        checkpointing = f"auto: {auto}" if auto else "set"
        print(
            f"| `{name}` | {model} | {checkpointing} | {result.phase('rollout') / GiB:.1f} | "
            f"{result.phase('update') / GiB:.1f} | {verdict} |"
        )
    print(f"\nslowest plan: {max(t for *_, t in results):.2f} s (composition included)")
    if args.tables:
        for name, result, _ in results:
            if result is not None:
                print(f"\n{name}\n{result.table()}")


if __name__ == "__main__":
    main()
