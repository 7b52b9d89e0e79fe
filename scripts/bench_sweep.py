"""Wall-clock of a 2x2 ``cluster=local`` sweep run one point at a time and two side by side, in one run.

Issue 29 asks that ``cluster.parallel=2`` finish in <= 0.65x the sequential time on 2 cores. The same sweep
(``trainer.seed=0,1 optimizer.lr_scale=1,2``) runs three times, each in a fresh sweep dir and with automatic threads:
with Hydra's basic launcher (``hydra/launcher=basic``: every point inside the submitting process, as sweeps ran
before launcher/cluster/local_sweep.py), with ``cluster.parallel=1`` (a process per point, one after the other:
2 threads each on 2 cores) and with ``cluster.parallel=2`` (two processes, 1 thread each). Printed: each wall-clock,
the ratios of ``parallel=2`` to both sequential figures (the acceptance uses the faster of the two), the CPUs this
process may use and the load average before and after (a busy machine makes every figure slower, not the ratio
fairer: say so with the figures), then one JSON object.

    .venv/bin/python scripts/bench_sweep.py              # the demo (tiny FLUX twin), 20 steps a point
    .venv/bin/python scripts/bench_sweep.py --steps 150  # the demo's own budget (its default sweep; ~11 minutes)
    .venv/bin/python scripts/bench_sweep.py --quick      # experiment=smoke, 8 steps a point (~2 minutes on 2 cores)

The fixed costs (imports once per sweep; per point: the model build, the evaluations, the checkpoint) weigh more in a
short point: the ratio falls as ``--steps`` grows (docs/clusters.md#local-sweeps).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SWEEP = ["trainer.seed=0,1", "optimizer.lr_scale=1,2", "logger=none", "trainer.export=false", "trainer.progress=false"]
VARIANTS = {
    "basic": ["hydra/launcher=basic"],
    "parallel_1": ["cluster.parallel=1"],
    "parallel_2": ["cluster.parallel=2"],
}


def run_sweep(extra: list[str], size: list[str], folder: Path) -> float:
    cmd = [sys.executable, "-m", "launcher", "-m", *SWEEP, *size, *extra, f"hydra.sweep.dir={folder}"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_SILENT": "true"}
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    took = time.perf_counter() - start
    if proc.returncode:
        sys.exit(f"bench_sweep: {' '.join(extra)} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="experiment=smoke, 8 steps a point")
    parser.add_argument("--steps", type=int, default=20, help="training steps a demo point (the demo's own: 150)")
    args = parser.parse_args()
    demo = [f"trainer.steps={args.steps}", "trainer.sample_every=0"]
    size = ["experiment=smoke", "trainer.steps=8"] if args.quick else demo
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load_before = os.getloadavg()[0]
    seconds = {}
    with tempfile.TemporaryDirectory(prefix="bench_sweep_") as tmp:
        for name, extra in VARIANTS.items():
            seconds[name] = run_sweep(extra, size, Path(tmp) / name)
            print(f"{name:<11} {seconds[name]:7.1f} s", flush=True)
    load_after = os.getloadavg()[0]
    sequential = min(seconds["basic"], seconds["parallel_1"])
    ratio = seconds["parallel_2"] / sequential
    print(f"parallel_2 / basic      = {seconds['parallel_2'] / seconds['basic']:.3f}")
    print(f"parallel_2 / parallel_1 = {seconds['parallel_2'] / seconds['parallel_1']:.3f}")
    print(
        f"parallel_2 / sequential = {ratio:.3f} (target <= 0.65) on {cpus} CPUs, load {load_before:.1f} -> {load_after:.1f}"
    )
    print(
        json.dumps(
            {
                "seconds": {k: round(v, 1) for k, v in seconds.items()},
                "ratio": round(ratio, 3),
                "cpus": cpus,
                "load_before": load_before,
                "load_after": load_after,
                "quick": args.quick,
                "steps": 8 if args.quick else args.steps,
            }
        )
    )


if __name__ == "__main__":
    main()
