"""Host cost of sampling a step's prompts (launcher/train/data.py), at 1 M prompts beside 1 k, in one run.

The prompt source draws one permutation per epoch and keeps it; a step reads a slice of it. So the cost of a step's
batch should not grow with the prompt set: only the epoch's draw does, and it is paid once per epoch (and once when a
run resumes mid-epoch). Printed per size: the first step (which draws the epoch's permutation, what a resume pays),
the mean of the following steps, and the per-step figure amortised over the epoch (steady + draw / steps per epoch).
The last lines are the ratio of the amortised figures (issue 27 asks for <= 2x) and one JSON object.

    .venv/bin/python scripts/bench_data.py            # 1 M vs 1 k prompts, 4 prompts per step, 20 000 steps
    .venv/bin/python scripts/bench_data.py --quick    # 1 M vs 1 k, 2 000 steps (a few seconds)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from launcher.train.data import PromptSource  # noqa: E402
from launcher.train.data_config import DataConfig  # noqa: E402


def measure(size: int, per_step: int, steps: int, seed: int = 0) -> dict:
    source = PromptSource(DataConfig(name="bench", prompts=[f"prompt {i}" for i in range(size)]), seed=seed)
    steps_per_epoch = size / per_step
    start = int(steps_per_epoch * 0.37)  # mid-epoch, as a resumed run starts
    t0 = time.perf_counter()
    source.batch(start, per_step)
    first = time.perf_counter() - t0
    # steady steps stay inside the epoch, so each costs a slice and a lookup, never a draw
    count = max(1, min(steps, int(steps_per_epoch) - start - 1))
    t0 = time.perf_counter()
    for s in range(start + 1, start + 1 + count):
        source.batch(s, per_step)
    steady = (time.perf_counter() - t0) / count
    return {
        "prompts": size,
        "first_step_s": first,
        "steady_step_s": steady,
        "amortised_step_s": steady + first / steps_per_epoch,
        "steps_timed": count,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="2 000 timed steps per size instead of 20 000")
    parser.add_argument("--prompts-per-step", type=int, default=4)
    parser.add_argument("--small", type=int, default=1_000)
    parser.add_argument("--large", type=int, default=1_000_000)
    args = parser.parse_args()
    steps = 2_000 if args.quick else 20_000
    rows = [measure(n, args.prompts_per_step, steps) for n in (args.small, args.large)]
    for r in rows:
        print(
            f"{r['prompts']:>9,} prompts: first step (draws the epoch's permutation) {r['first_step_s'] * 1e3:8.3f} ms"
            f" | steady {r['steady_step_s'] * 1e6:7.2f} us/step over {r['steps_timed']} steps"
            f" | amortised {r['amortised_step_s'] * 1e6:7.2f} us/step"
        )
    small, large = rows
    ratio = large["amortised_step_s"] / small["amortised_step_s"]
    print(
        f"prompt sampling per step: {large['prompts']:,} prompts {large['amortised_step_s'] * 1e6:.2f} us vs "
        f"{small['prompts']:,} prompts {small['amortised_step_s'] * 1e6:.2f} us: ratio {ratio:.2f}x (target <= 2x)"
    )
    print(json.dumps({"rows": rows, "ratio": ratio, "prompts_per_step": args.prompts_per_step}))


if __name__ == "__main__":
    main()
