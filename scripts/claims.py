#!/usr/bin/env python
"""The papers' claims, each tested on a CPU testbed where it could show (issue 18).

Every study checks its testbed's precondition first and prints it, trains each variant through rewardflow's trainer
for several seeds, and writes ``<out>/<study>.json`` (the verdict, the statistics and every run's raw data); every page
is then written from the JSON (claim_studies/pages.py): ``<out>/<study>.md`` (the write-up and its verdict, in the
words of claim_studies/verdicts.py: reproduced / not shown / inconclusive / refuted), ``<out>/<study>_*.png``,
``<out>/index.md`` (one row per claim) and, into docs/results, the claims blocks of README.md and docs/results.md. Studies:
``flash`` (claim_studies/flash.py), ``jagg`` (claim_studies/jagg.py), ``eam`` (claim_studies/eam.py).

    nice -n 10 .venv/bin/python scripts/claims.py                   # every study, into docs/results/
    nice -n 10 .venv/bin/python scripts/claims.py --studies eam     # one study (the others' pages stay)
    .venv/bin/python scripts/claims.py --quick --out /tmp/claims    # the CI form: a few steps of every part
    nice -n 10 .venv/bin/python scripts/claims.py --report-only     # every page and plot from the saved JSON

The full studies take about 15 CPU-minutes each on one thread (more wall-clock on a shared machine); run them with
``nice``. The quick form's figures mean nothing: it only shows the code runs end to end.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
# the studies' process settings, set by this entry point (not on import, so a test importing the studies' helpers
# leaves its process's environment alone: SLURM jobs it submits later inherit it)
os.environ.update(
    HF_HUB_OFFLINE="1",
    TRANSFORMERS_OFFLINE="1",
    WANDB_MODE="disabled",
    HF_HUB_DISABLE_PROGRESS_BARS="1",
    TOKENIZERS_PARALLELISM="false",
)

from claim_studies import pages  # noqa: E402
from claim_studies.common import DEFAULT_SEEDS, ROOT, Context  # noqa: E402
from claim_studies.pages import STUDIES, finite  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--studies", default=",".join(STUDIES), help=f"comma list of {', '.join(STUDIES)}")
    p.add_argument(
        "--seeds",
        default=",".join(map(str, DEFAULT_SEEDS)),
        help="training seeds of every compared variant (>= 5 for a verdict; the quick form uses the first 2)",
    )
    p.add_argument("--quick", action="store_true", help="a few steps of every part (CI); figures mean nothing")
    p.add_argument("--out", default=None, help="output folder (default docs/results; --quick: outputs/claims_quick)")
    p.add_argument("--work", default=None, help="run directories (default outputs/claims)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per run")
    p.add_argument(
        "--testbeds",
        default=None,
        help="flash only: comma list of its testbeds to run (linear, twin); "
        "the others' data are kept from <out>/flash.json",
    )
    p.add_argument(
        "--lambdas",
        default=None,
        help="eam only: comma list of its reward scales to run (default 0.4,0.8,3.2); the others' runs are kept from "
        "<out>/eam.json",
    )
    p.add_argument(
        "--report-only",
        action="store_true",
        help="train nothing: rewrite every page (and, into docs/results, the README's and docs/results.md's claims "
        "blocks) and plot from <out>/<study>.json",
    )
    args = p.parse_args(argv)
    names = [s.strip() for s in args.studies.split(",") if s.strip()]
    unknown = [s for s in names if s not in STUDIES]
    if unknown:
        p.error(f"--studies: unknown {unknown}; choose from {', '.join(STUDIES)}")
    requested = seeds = [int(s) for s in args.seeds.split(",")]
    if args.quick:
        seeds = seeds[:2]
    out = Path(args.out) if args.out else ROOT / ("outputs/claims_quick" if args.quick else "docs/results")
    work = Path(args.work) if args.work else ROOT / "outputs" / ("claims_quick" if args.quick else "claims")
    parts = [t.strip() for t in args.testbeds.split(",")] if args.testbeds else None
    if parts and names != ["flash"]:
        p.error("--testbeds needs --studies flash")
    if args.lambdas:
        if names != ["eam"]:
            p.error("--lambdas needs --studies eam")
        parts = [t.strip() for t in args.lambdas.split(",")]
    ctx = Context(quick=args.quick, seeds=seeds, work=work, threads=args.threads, parts=parts)
    for name in [] if args.report_only else names:
        study = importlib.import_module(f"claim_studies.{name}")
        print(f"== {STUDIES[name]} ==", flush=True)
        wall, cpu = time.time(), time.process_time()
        data = finite(study.run(ctx))
        command = (
            "scripts/claims.py"
            + (" --quick" if args.quick else "")
            + f" --studies {name}"
            + (f" --seeds {args.seeds}" if requested != DEFAULT_SEEDS else "")
            + (f" --lambdas {args.lambdas}" if args.lambdas else "")
            + (f" --testbeds {args.testbeds}" if args.testbeds else "")
        )
        meta = {
            "study": name,
            "command": command,
            "seeds": seeds,
            "quick": args.quick,
            "date": datetime.date.today().isoformat(),
            "cpu_s": time.process_time() - cpu,
            "wall_s": time.time() - wall,
            "machine": f"{platform.machine()}, {args.threads} torch thread(s)",
        }
        if (args.testbeds or args.lambdas) and (out / f"{name}.json").exists():  # keep the parts not rerun
            saved = json.loads((out / f"{name}.json").read_text())
            if args.lambdas:  # the other reward scales' runs; the side-by-side costs are this run's
                by_lambda = {**saved["raw"].get("by_lambda", {}), **data["by_lambda"]}
                data["by_lambda"] = dict(sorted(by_lambda.items(), key=lambda kv: float(kv[0])))
                data["lambdas"] = [float(k) for k in data["by_lambda"]]
            else:
                data = {**saved["raw"], **data}
            meta["cpu_s"] += saved["meta"]["cpu_s"]
            meta["wall_s"] += saved["meta"]["wall_s"]
        result = pages.write_up(name, data, out)
        pages.close(result.figures)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{name}.json").write_text(pages.study_json(result, meta))
        print(f"{STUDIES[name]}: {result.verdict} -- {result.summary['figures']}", flush=True)
    for path in pages.write(out):  # every page from the JSON, the new study's and the others'
        print(f"   wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
