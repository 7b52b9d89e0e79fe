"""The trainer sections' output (issue 27, item 7c): each fine-tuning mode's figures printed as a labelled block
(every concern of item 7b under its own heading, CPU stand-ins said as such), then one JSON of everything
(``<out>/gpu_check.json``) and a dated markdown table the README's *Measured* section can take
(``<out>/gpu_check_table.md``)."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

from gpu_measure.record import finite_json

JSON_NAME = "gpu_check.json"
TABLE_NAME = "gpu_check_table.md"
PHASES = ("rollout", "reward", "update")


def _g(x, fmt: str = ".3g", none: str = "n/a") -> str:
    return none if x is None else format(x, fmt)


def _pct(x) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def memory_lines(res: dict) -> list[str]:
    mem = res["memory"]
    planned = mem.get("planned") or {}
    measured = mem["measured"]
    head = "  memory per phase (GiB)         measured    planned"
    if measured is None:
        head += "   [CPU stand-in: no per-phase allocator peak on the CPU, the plan only]"
    rows = [head]
    for phase, plan_key in (("rollout", "rollout"), ("reward", "rollout"), ("update", "update")):
        got = None if measured is None else measured.get(phase)
        rows.append(f"    {phase:27s} {_g(got, '9.2f', '      n/a')}  {_g(planned.get(plan_key), '9.2f', '      n/a')}")
    rows.append(f"    {'planned peak':27s} {'':9s}  {_g(planned.get('peak'), '9.2f', '      n/a')}")
    if mem.get("plan_choices"):
        rows.append(f"    plan chose: {', '.join(f'{k}={v}' for k, v in mem['plan_choices'].items())}")
    return rows


def print_mode(res: dict) -> None:
    on_cpu = res["device"] != "cuda"
    s, syncs, dcp = res["seconds"], res["host_syncs"], res["dcp"]
    lines = [
        f"== (b) trainer at FLUX.1 width: DanceGRPO {res['mode']}, {res['blocks'][0]} + {res['blocks'][1]} blocks "
        f"({res['params_b']:.3g} B params, {res['trainable_b']:.3g} B trained), {res['image_tokens']} image + "
        f"{res['text_tokens']} text tokens, {res['dtype']} on {res['device']} ==",
        *memory_lines(res),
        "  seconds per phase (synchronised"
        + (": wall clock, the CPU runs in order)" if on_cpu else ": CUDA events)")
        + "  "
        + ", ".join(f"{p} {_g(s.get(p), '.3f')}" for p in (*PHASES, "step")),
        f"  MFU (transformer, executed FLOPs {res['flop']['step_transformer'] / 1e12:.4g} TFLOP/step of "
        f"{res['flop']['step_total'] / 1e12:.4g} counted)",
        f"    vs spec peak {_g(res['spec_peak_tflops'])} TFLOP/s ({res['spec_peak_device']}): step {_pct(res['mfu_spec'])}; "
        + ", ".join(f"{p} {_pct(res['mfu_phase_spec'][p])}" for p in PHASES),
        f"    vs measured {res['dtype']} matmul ceiling {_g(res['ceiling_tflops'])} TFLOP/s: step "
        f"{_pct(res['mfu_ceiling'])}; " + ", ".join(f"{p} {_pct(res['mfu_phase_ceiling'][p])}" for p in PHASES),
        f"  host syncs (counted on {syncs['counted_on']}): {syncs['total']} in step 1 ({syncs['copies']} host<->device "
        f"copies); by phase {syncs['per_phase']}; {syncs['per_update']:.3g} per optimizer update",
        "  first-update ratios |rho - 1| (before any optimizer step; 0 in exact arithmetic):",
    ]
    for step, fu in res["first_update"].items():
        lines.append(
            f"    {step}: mean {_g(fu['dev_mean'])} p50 {_g(fu['dev_p50'])} p90 {_g(fu['dev_p90'])} "
            f"p99 {_g(fu['dev_p99'])} max {_g(fu['dev_max'])} clipped {_g(fu['clip_frac'])}"
        )
    if dcp.get("status") == "ok":
        lines.append(
            f"  DCP save and resume: step 1 saved in {dcp['save_s']:.2f} s ({dcp['bytes'] / 2**20:.1f} MiB), reopened "
            f"in {dcp['reopen_s']:.2f} s at step {dcp['resumed_at']}; step 2 again: loss diff {dcp['loss_abs_diff']:.3g}, "
            f"reward diff {dcp['reward_abs_diff']:.3g}, weights rel diff {dcp['weights_rel_diff']:.3g}"
        )
    else:
        lines.append(f"  DCP save and resume: {dcp.get('status')}: {dcp.get('reason')}")
    print("\n".join(lines), flush=True)


def markdown_table(report: dict) -> str:
    date = report["date"][:10]
    rows = [
        f"### GPU check, {date}: {report['device']} (`{report['command']}`)",
        "",
        "| DanceGRPO | blocks (params) | step s: rollout / reward / update | peak GiB measured / planned: "
        "rollout, update | MFU vs spec / vs matmul ceiling | host syncs per update | first update \\|ρ−1\\| p50 / max, "
        "clipped | DCP save / resume |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for mode, r in report.get("trainer", {}).items():
        s, mem, fu, dcp = r["seconds"], r["memory"], r["first_update"]["step_2"], r["dcp"]
        measured, planned = mem["measured"] or {}, mem.get("planned") or {}
        resume = (
            f"{dcp['save_s']:.1f} s / {dcp['reopen_s']:.1f} s, loss diff {dcp['loss_abs_diff']:.2g}"
            if dcp.get("status") == "ok"
            else f"{dcp.get('status')}"
        )
        rows.append(
            f"| {mode} | {r['blocks'][0]} + {r['blocks'][1]} ({r['params_b']:.2f} B) | {_g(s['step'], '.2f')}: "
            f"{_g(s['rollout'], '.2f')} / {_g(s['reward'], '.2f')} / {_g(s['update'], '.2f')} | "
            f"{_g(measured.get('rollout'), '.1f')} / {_g(planned.get('rollout'), '.1f')}, "
            f"{_g(measured.get('update'), '.1f')} / {_g(planned.get('update'), '.1f')} | "
            f"{_pct(r['mfu_spec'])} / {_pct(r['mfu_ceiling'])} | {r['host_syncs']['per_update']:.3g} | "
            f"{_g(fu['dev_p50'], '.2g')} / {_g(fu['dev_max'], '.2g')}, {_g(fu['clip_frac'], '.2g')} | {resume} |"
        )
    eq = report.get("equality", [])
    if eq:
        rows += ["", "| twin, 3 steps | vs CPU fp32 | reward diff | weights rel diff | tolerance | verdict |"]
        rows.append("| --- | --- | --- | --- | --- | --- |")
        for e in eq:
            rows.append(
                f"| {e['twin']} | {e['device']} {e['dtype']} | {e['reward_abs_diff']:.2g} | "
                f"{e['weights_rel_diff']:.2g} | {e['tolerance']:g} | {'equal' if e['within_tolerance'] else 'DIFFERS'} |"
            )
    return "\n".join(rows) + "\n"


def write_report(out_dir: Path, report: dict) -> tuple[Path, Path]:
    """``gpu_check.json`` and ``gpu_check_table.md`` in ``out_dir``; the table printed under the (c) heading."""
    report = {"date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), **report}
    path_json, path_md = out_dir / JSON_NAME, out_dir / TABLE_NAME
    path_json.write_text(json.dumps(finite_json(report), indent=1, default=str) + "\n")
    table = markdown_table(report)
    path_md.write_text(table)
    print(f"== (c) report: {path_json.name} and {path_md.name} in {out_dir} ==\n{table}", flush=True)
    return path_json, path_md
