"""The method benches (``scripts/bench_jagg.py``, ``bench_flash.py``, ``bench_eam.py``) on the device, each in a
subprocess stopped a second before its share ends: on the GPU with the FLUX twin at FLUX.1-dev's block width
(``--config wide``: 24 heads x 128, 2 double + 4 single blocks, 1.3 B parameters, 1024 image tokens). The bench's
last JSON line is recorded with its headline ratios; its whole output goes to ``<out>/<bench>.log``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from gpu_measure.profile import Check
from gpu_measure.record import Recorder

ROOT = Path(__file__).resolve().parents[2]
# bench -> (what its ratio compares, the ratio's key, a reference figure's key, the reference in words)
HEADLINES = {
    "bench_jagg": ("JAGG / DanceGRPO update time", "update_time_ratio", "ideal_update_time_ratio", "ideal"),
    "bench_flash": (
        "Flash-GRPO / Flow-GRPO update time",
        "update_time_ratio_vs_flow_grpo",
        "ideal_update_ratio_vs_flow_grpo",
        "ideal",
    ),
    "bench_eam": ("AM / EAM iteration time", "iter_time_ratio_am_over_eam", "nfe_ratio_am_over_eam", "NFE ratio"),
}


def last_json(output: str) -> dict | None:
    for line in reversed(output.strip().splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
    return None


def section_bench(chk: Check, rec: Recorder, name: str, allowance: float) -> None:
    cmd = [sys.executable, str(ROOT / "scripts" / f"{name}.py"), *chk.profile.bench_args[name]]
    log = chk.out_dir / f"{name}.log"
    shown = " ".join([f"scripts/{name}.py", *cmd[2:]])
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    try:
        proc = subprocess.run(
            cmd,
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            timeout=max(1.0, allowance - 1.0),
        )
        output, rc = proc.stdout, proc.returncode
    except subprocess.TimeoutExpired as e:
        output = e.output.decode(errors="replace") if isinstance(e.output, bytes) else (e.output or "")
        log.write_text(output)
        rec.write(
            name,
            HEADLINES[name][0],
            status="timeout",
            command=shown,
            log=log.name,
            reason=f"stopped at its {allowance:.0f} s share",
            tail=output[-1500:],
        )
        return
    log.write_text(output)
    found = last_json(output)
    if rc != 0 or found is None:
        rec.write(
            name,
            HEADLINES[name][0],
            status="error",
            command=shown,
            log=log.name,
            returncode=rc,
            error=f"exit code {rc}" + ("" if found else ", no JSON line"),
            tail=output[-1500:],
        )
        return
    what, measured, reference, reference_name = HEADLINES[name]
    ratio, ref = found.get(measured), found.get(reference)
    rec.write(
        name,
        what,
        command=shown,
        log=log.name,
        returncode=rc,
        ratio=ratio,
        reference=ref,
        result=found,
        value=f"{_num(ratio)} ({reference_name} {_num(ref)})",
    )


def _num(x) -> str:
    return f"{x:.3f}" if isinstance(x, (int, float)) else "n/a"
