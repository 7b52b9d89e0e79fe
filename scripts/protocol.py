"""The comparison protocol, end to end (docs/comparing.md#comparison-protocol): the sweep, the selection, the page.

1. Writes the flow-matching pre-trained tiny FLUX twin once (the claim studies' starting point,
   scripts/bench_eam.py ``pretrained_twin``) as a model folder, so every run starts from it through ``model.path``.
2. Runs ``rewardflow -m experiment=protocol`` over methods x ``optimizer.lr_scale`` x seeds (one Hydra multirun; a
   re-run resumes its finished points from their own run dirs).
3. Reads every run's ``metrics.jsonl`` and config, picks each method's rate on the validation prompts and reports
   its held-out score (scripts/protocol_select.py), with ``rewardflow-compare``'s statistics.
4. Writes ``protocol.json`` and ``protocol.md`` (the full form: docs/results/; ``--quick``: ``--out``) and runs
   ``rewardflow-compare`` on each method's chosen runs into ``<out>/compare/``.

    nice -n 10 .venv/bin/python scripts/protocol.py                 # 5 methods x 3 rates x 5 seeds, 150 steps
    nice -n 10 .venv/bin/python scripts/protocol.py --quick         # 2 x 2 x 2, 4 steps: the code path, minutes
    .venv/bin/python scripts/protocol.py --report-only [--out DIR]  # the page again from protocol.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "scripts"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from protocol_select import Point, Run, markdown, select  # noqa: E402

# the recipe: the same rate multipliers for every method (spanning 10x around its own optimizer.lr), 5 seeds
METHODS = ["dance_grpo", "diffusion_nft", "flow_grpo_fast", "jagg", "flash_grpo"]
LR_SCALES = [0.316, 1.0, 3.16]
SEEDS = [0, 1, 2, 3, 4]
BASELINE = "dance_grpo"
PRETRAIN_STEPS = 600  # the claim studies' pre-training of the twin (scripts/claim_studies/jagg.py, flash.py)
# the quick form: the same code path in minutes (its figures mean nothing)
QUICK = {
    "methods": ["dance_grpo", "flow_grpo_fast"],
    "lr_scales": [0.316, 3.16],
    "seeds": [0, 1],
    "pretrain_steps": 4,
    "overrides": ["trainer.steps=4", "eval.every=2", "logger=none"],  # 2 samples per prompt: the demo's diversity
}
FULL_OUT = ROOT / "docs" / "results"


def pretrained_folder(steps: int) -> Path:
    """The tiny FLUX twin's folder with its transformer replaced by the flow-matching pre-trained one (cached next to
    the twin): ``model=tiny_flux model.path=<it>`` loads it like the twin."""
    from diffusers import FluxTransformer2DModel

    from bench_eam import pretrained_twin
    from models.tiny_flux import materialize_tiny_flux
    from models.twins import default_cache_dir, materialize_folder

    def write(folder: Path) -> None:
        shutil.copytree(materialize_tiny_flux(), folder, dirs_exist_ok=True)
        transformer = FluxTransformer2DModel.from_pretrained(folder / "transformer")
        transformer.load_state_dict(pretrained_twin(steps))
        shutil.rmtree(folder / "transformer")
        transformer.save_pretrained(folder / "transformer")

    return materialize_folder("tiny_flux_fm", f"s{steps}", write, default_cache_dir())


def sweep(out: Path, methods, scales, seeds, model_path: Path, extra: list[str]) -> Path:
    """One ``rewardflow -m`` over the grid into ``<out>/sweep``."""
    sweep_dir = out / "sweep"
    cmd = [
        sys.executable,
        "-m",
        "launcher",
        "-m",
        "experiment=protocol",
        f"method={','.join(methods)}",
        f"optimizer.lr_scale={','.join(f'{s:g}' for s in scales)}",
        f"trainer.seed={','.join(map(str, seeds))}",
        f"model.path={model_path}",
        "trainer.progress=false",
        f"hydra.sweep.dir={sweep_dir}",
        *extra,
    ]
    print("$ " + " ".join(cmd[2:]).replace("launcher -m", "rewardflow -m", 1), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT)
    return sweep_dir


def read_run(folder: Path) -> Run:
    """A run folder's evaluations at their compute: the transformer passes of the training rows logged before each
    evaluation row of ``metrics.jsonl``, its device-seconds (``time/eval_gpu_hours`` x 3600) and its two scores."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(folder / ".hydra" / "config.yaml")
    reward = str(cfg.reward.name)
    run = Run(str(cfg.method.name), float(cfg.optimizer.lr_scale), int(cfg.trainer.seed), source=str(folder))
    passes = 0.0
    for line in (folder / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if f"eval/{reward}/mean" in row:
            run.points.append(
                Point(
                    passes, 3600.0 * row["time/eval_gpu_hours"], row[f"val/{reward}/mean"], row[f"eval/{reward}/mean"]
                )
            )
        elif "count/transformer_fwd" in row:
            passes += float(row["count/transformer_fwd"]) + float(row["count/transformer_bwd"])
    if not run.points:
        raise SystemExit(f"{folder}: no evaluation rows in metrics.jsonl (eval.every must be > 0)")
    return run


def protocol_settings(folders: list[Path]) -> tuple[float | None, float | None]:
    """``protocol.target`` and ``protocol.margin`` of the runs (they must all agree: launcher/compare/protocol.py)."""
    from launcher.compare.local import load_local
    from launcher.compare.protocol import fixed_in_config

    runs = load_local(folders, "jsonl")
    return fixed_in_config(runs, "target"), fixed_in_config(runs, "margin")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="2 methods x 2 rates x 2 seeds, 4 steps (the code path)")
    ap.add_argument("--out", type=Path, help="where protocol.json/.md go (default docs/results; --quick: a temp dir)")
    ap.add_argument("--work", type=Path, help="where the sweep's run dirs go (default <out>/protocol or outputs/)")
    ap.add_argument("--report-only", action="store_true", help="rewrite protocol.md from <out>/protocol.json")
    ap.add_argument("overrides", nargs="*", help="more Hydra overrides for every run (e.g. trainer.threads=1)")
    args = ap.parse_args(argv)
    out = args.out or (Path(f"/tmp/rewardflow-protocol-{time.strftime('%Y%m%d-%H%M%S')}") if args.quick else FULL_OUT)
    out.mkdir(parents=True, exist_ok=True)
    if args.report_only:
        data = json.loads((out / "protocol.json").read_text())
        (out / "protocol.md").write_text(markdown(data["result"], page_header(data)))
        print(f"wrote {out}/protocol.md")
        return 0
    q = QUICK if args.quick else None
    methods, scales, seeds = (q["methods"], q["lr_scales"], q["seeds"]) if q else (METHODS, LR_SCALES, SEEDS)
    steps = q["pretrain_steps"] if q else PRETRAIN_STEPS
    work = args.work or (out / "protocol" if args.quick else ROOT / "outputs" / "protocol")
    t0 = time.time()
    model_path = pretrained_folder(steps)
    t_sweep = time.time()
    sweep_dir = sweep(work, methods, scales, seeds, model_path, [*(q["overrides"] if q else []), *args.overrides])
    sweep_s = time.time() - t_sweep
    folders = sorted(p.parent for p in sweep_dir.glob("*/metrics.jsonl"))
    runs = [read_run(f) for f in folders]
    target, margin = protocol_settings(folders)
    result = select(runs, margin, target, BASELINE)
    data = {
        "quick": bool(q),
        "methods": methods,
        "lr_scales": scales,
        "seeds": seeds,
        "pretrain_steps": steps,
        "overrides": [*(q["overrides"] if q else []), *args.overrides],
        "runs": len(runs),
        "sweep_dir": str(sweep_dir),
        "sweep_wallclock_s": sweep_s,
        "pretrain_and_sweep_wallclock_s": time.time() - t0,
        "date": time.strftime("%Y-%m-%d"),
        "result": result,
    }
    (out / "protocol.json").write_text(json.dumps(data, indent=2))
    (out / "protocol.md").write_text(markdown(result, page_header(data)))
    chosen = [r.source for r in runs if r.lr_scale == result["methods"][r.method]["best_lr_scale"]]
    from launcher.compare.cli import main as compare

    compare([*chosen, "--baseline", BASELINE, "--metric", f"eval/{reward_name(folders[0])}/mean",
             "--out", str(out / "compare")])  # fmt: skip
    print((out / "protocol.md").read_text())
    print(f"wrote {out}/protocol.json, protocol.md, compare/ ({len(runs)} runs, sweep {sweep_s:.0f} s)")
    return 0


def reward_name(folder: Path) -> str:
    from omegaconf import OmegaConf

    return str(OmegaConf.load(folder / ".hydra" / "config.yaml").reward.name)


def page_header(data: dict) -> list[str]:
    """The page's title, what was run and how to run it again."""
    form = "quick form (its figures mean nothing)" if data["quick"] else "full form"
    cmd = "nice -n 10 .venv/bin/python scripts/protocol.py" + (" --quick" if data["quick"] else "")
    return [
        "# Comparison protocol",
        "",
        f"Measured {data['date']}, {form}: {len(data['methods'])} methods x {len(data['lr_scales'])} learning rates "
        f"(`optimizer.lr_scale` {', '.join(f'{s:g}' for s in data['lr_scales'])} x each method's `optimizer.lr`) x "
        f"{len(data['seeds'])} seeds = {data['runs']} runs from the flow-matching pre-trained tiny FLUX twin "
        f"({data['pretrain_steps']} pre-training steps), `experiment=protocol` "
        f"{' '.join(data['overrides'])}; target {data['result']['target']} and margin {data['result']['margin']} "
        f"fixed in the config before the runs. Each method's rate is the best on the validation prompts "
        f"(`val/<reward>/mean`), its score the held-out one (`eval/<reward>/mean`). Sweep wall-clock "
        f"{data['sweep_wallclock_s']:.0f} s. Reproduce: `{cmd}` (recipe: "
        f"[comparing](../comparing.md#comparison-protocol)).",
    ]


if __name__ == "__main__":
    sys.exit(main())
