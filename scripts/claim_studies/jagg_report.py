"""The JAGG study's write-up: statistics, verdict, markdown and figures, from the data :mod:`.jagg` saved."""

from __future__ import annotations

import statistics

from claim_studies.common import (
    INCONCLUSIVE,
    MIN_SEEDS,
    NOT_SHOWN,
    REFUTED,
    REPRODUCED,
    StudyResult,
    agreed,
    estimate,
    fmt,
    page_head,
    paired,
    plot_seeds,
    pyplot,
    reproduce,
    sign_of,
    stats_json,
    table,
)
from claim_studies.jagg import VARIANTS, cosines
from launcher.compare.stats import Estimate

LABELS = {
    "jagg": "JAGG",
    "exact": "exact (jagg_frac=0)",
    "endpoints_only": "ablation: endpoints only",
    "nearest_endpoint": "ablation: nearest endpoint",
}
MARGIN = 0.1  # non-inferiority margin: JAGG may lose at most this fraction of the exact baseline's gain


def statistics_of(data: dict) -> dict:
    runs = data["runs"]
    finals = {v: [r["evals"][-1][3] for r in runs[v]] for v in runs}
    out = {}
    for v in runs:
        gains = [r["evals"][-1][3] - r["evals"][0][3] for r in runs[v]]
        cos = [c for r in runs[v] for cs in cosines(r["rows"]).values() for c in cs]
        units = [
            (row["count/transformer_fwd"] + 2 * row["count/transformer_bwd"]) for r in runs[v] for row in r["rows"][1:2]
        ]
        out[v] = {
            "final": estimate(finals[v]),
            "gain": estimate(gains),
            "diff": paired(finals[v], finals["exact"]) if v != "exact" else None,
            "cos": estimate(
                [
                    statistics.mean([c for cs in cosines(r["rows"]).values() for c in cs])
                    for r in runs[v]
                    if cosines(r["rows"])
                ]
            )
            if cos
            else None,
            "units_per_step": units[0] if units else float("nan"),
        }
    return out


def verdict_of(data: dict, stats: dict) -> tuple[str, str, float]:
    """Non-inferiority of JAGG to the exact gradient at margin ``MARGIN`` x the exact baseline's mean gain."""
    if not data["precondition"]["passed"]:
        return INCONCLUSIVE, "no regime with a realistic cosine was found, so nothing was trained", float("nan")
    if len(data["seeds"]) < MIN_SEEDS:
        return INCONCLUSIVE, f"fewer than {MIN_SEEDS} seeds", float("nan")
    exact_gain = stats["exact"]["gain"]
    if sign_of(exact_gain) <= 0:
        return (
            INCONCLUSIVE,
            "the exact baseline did not improve on the base model, so there is no quality to keep",
            float("nan"),
        )
    margin = MARGIN * exact_gain.mean
    d = stats["jagg"]["diff"]
    if d.has_interval and d.lo > -margin:
        return REPRODUCED, f"JAGG minus exact lies above -{MARGIN:.0%} of the exact gain ({-margin:.4f})", margin
    if d.has_interval and d.hi < -margin:
        return REFUTED, f"JAGG loses more than {MARGIN:.0%} of the exact gain", margin
    return NOT_SHOWN, f"the interval of JAGG minus exact straddles -{MARGIN:.0%} of the exact gain", margin


def interpolation_verdict(data: dict, stats: dict) -> tuple[str, str, Estimate | None]:
    """The claim's second half: the t-interpolation does the work, i.e. JAGG ends above the nearest-endpoint ablation
    (the same two backward passes, each step's upstream gradient sent whole to the nearer endpoint)."""
    if "nearest_endpoint" not in stats or len(data["seeds"]) < MIN_SEEDS:
        return INCONCLUSIVE, "the nearest-endpoint ablation was not trained on enough seeds", None
    d = paired(list(stats["jagg"]["final"].values), list(stats["nearest_endpoint"]["final"].values))
    sign = sign_of(d)
    if sign > 0:
        return REPRODUCED, "JAGG ends above nearest-endpoint", d
    if sign < 0:
        return REFUTED, "nearest-endpoint ends above JAGG", d
    return NOT_SHOWN, "JAGG and nearest-endpoint end level", d


def scan_md(data: dict) -> str:
    pre = data["precondition"]
    rows = []
    for r in pre["scan"]:
        groups = ", ".join(f"group {g}: {statistics.mean(v):.3f}" for g, v in sorted(r["cos_by_group"].items()))
        rows.append(
            [
                str(r["steps"]),
                str(r["window"]),
                f"{r['eta']:g}",
                groups,
                f"{r['median_cos']:.3f}",
                "chosen" if r is pre["chosen"] or r == pre["chosen"] else "",
            ]
        )
    return (
        "JAGG over DanceGRPO on every group (`jagg_frac=1`, so the low-noise groups count), diagnostic cosine of "
        "the JAGG gradient against the exact one (`method.diagnose_every=1`) on the first steps from the "
        f"pre-trained model; the claim needs a regime as imperfect as the paper's (median <= "
        f"{pre['cosine_max']}).\n\n"
        + table(["sampling steps", "W", "eta", "mean cosine by group", "median", ""], rows)
        + f"\n\n**Precondition {'passed' if pre['passed'] else 'failed'}.**"
    )


def results_md(data: dict, stats: dict) -> str:
    rows = []
    for v in VARIANTS:
        s = stats[v]
        rows.append(
            [
                LABELS[v],
                fmt(s["final"], 4),
                fmt(s["gain"], 4),
                "" if s["diff"] is None else fmt(s["diff"], 4),
                "" if s["cos"] is None else fmt(s["cos"], 3),
                f"{s['units_per_step']:.0f}",
            ]
        )
    return table(
        [
            "variant",
            "eval at the end",
            "gain over the base model",
            "minus exact (paired)",
            "cosine to the exact gradient during training",
            "forward-pass units / step",
        ],
        rows,
    )


def figures(data: dict) -> dict:
    plt = pyplot()
    if not data["runs"]:
        return {}
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for i, v in enumerate(VARIANTS):
        plot_seeds(ax, [r["evals"] for r in data["runs"][v]], 2, f"C{i}", LABELS[v])
    ax.set(
        xlabel="step",
        ylabel="evaluation reward (ODE, fixed noise, held-out prompts)",
        title=f"JAGG vs exact, {len(data['seeds'])} seeds; band: 95% interval",
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return {"jagg_curves": fig}


def regime(data: dict) -> str:
    """The layout the study trained, from the chosen precondition row: how many JAGG groups of how many steps."""
    chosen = data["precondition"]["chosen"]
    groups = len(chosen["cos_by_group"])
    return (
        f"{'one group' if groups == 1 else f'{groups} groups'} of W = {chosen['window']} over {chosen['steps']} "
        f"sampling steps, eta {chosen['eta']:g}"
    )


def confirmation_md(first: tuple, confirm: dict, confirm_stats: dict, confirm_verdict: tuple) -> str:
    """The fresh-seed confirmation run's section: its table, verdict and what the two runs say together."""
    verdict, _, margin = confirm_verdict
    rows = [
        [
            LABELS[v],
            fmt(confirm_stats[v]["final"], 4),
            "" if confirm_stats[v]["diff"] is None else fmt(confirm_stats[v]["diff"], 4),
            "" if confirm_stats[v]["cos"] is None else fmt(confirm_stats[v]["cos"], 3),
        ]
        for v in VARIANTS
    ]
    interp, _, interp_diff = interpolation_verdict(confirm, confirm_stats)
    chosen = confirm["precondition"]["chosen"]
    return "\n".join(
        [
            "## Confirmation on fresh seeds",
            "",
            f"The first run's verdict came from extending an inconclusive 5-seed look to {len(first[0]['seeds'])} seeds, "
            f"which can favour a verdict by chance, so the same study was run again, unchanged, on seeds never used "
            f"before ({confirm['seeds']}), the precondition scan included (data: [jagg_confirm.json](jagg_confirm.json)"
            "). Its precondition: median cosine "
            f"{chosen['median_cos']:.3f} in {regime(confirm)} "
            f"({'passed' if confirm['precondition']['passed'] else 'failed'}).",
            "",
            table(["variant", "eval at the end", "minus exact (paired)", "cosine to the exact gradient"], rows),
            "",
            f"JAGG − exact against the margin −{margin:.4f} ({MARGIN:.0%} of this run's exact gain): **{verdict}**. "
            f"JAGG − nearest-endpoint {fmt(interp_diff, 4) if interp_diff is not None else 'n/a'}: **{interp}**.",
            "",
        ]
    )


def write_up(data: dict, confirm: dict | None = None) -> StudyResult:
    """The page of ``data`` (a run's raw data); ``confirm``: the raw data of its confirmation on fresh seeds, whose
    verdict must agree with the first run's for the claim's verdict (:func:`claim_studies.verdicts.agreed`)."""
    pre = data["precondition"]
    stats = statistics_of(data) if data["runs"] else {}
    if data["runs"]:
        verdict, reason, margin = verdict_of(data, stats)
    else:
        verdict, reason, margin = INCONCLUSIVE, "no regime with a realistic cosine was found", float("nan")
    first_verdict, first_reason = verdict, reason
    confirmed = None
    if confirm is not None and confirm["runs"]:
        c_stats = statistics_of(confirm)
        confirmed = (c_stats, verdict_of(confirm, c_stats))
        verdict = agreed([first_verdict, confirmed[1][0]])
        reason = (
            f"first run: {first_verdict}, {first_reason}; confirmation on fresh seeds: {confirmed[1][0]}, "
            f"{confirmed[1][1]}"
        )
    claim = (
        f"JAGG's 2 backward passes per group of W keep the exact gradient's quality (arXiv:2607.17572); tested in "
        f"{regime(data)} (the paper's layout: groups of W = 4)"
    )
    interp, interp_reason, interp_diff = (
        interpolation_verdict(data, stats) if stats else (INCONCLUSIVE, "not trained", None)
    )
    chosen = pre["chosen"]
    figures_text = (
        f"JAGG − exact {fmt(stats['jagg']['diff'], 4)} (margin −{margin:.4f}, {len(data['seeds'])} seeds: "
        f"{first_verdict})"
        + (
            f"; on fresh seeds {fmt(confirmed[0]['jagg']['diff'], 4)} (margin −{confirmed[1][2]:.4f}: "
            f"{confirmed[1][0]})"
            if confirmed
            else ""
        )
        + f"; endpoints_only − exact "
        f"{fmt(stats['endpoints_only']['diff'], 4)}; the t-interpolation's share (JAGG − nearest-endpoint "
        f"{fmt(interp_diff, 4) if interp_diff is not None else 'n/a'}): {interp}"
        if stats
        else "not trained"
    )
    summary = {
        "claim": claim,
        "testbeds": "tiny FLUX twin, flow-matching pre-trained, colour reward, JAGG over DanceGRPO",
        "precondition": f"median JAGG-vs-exact cosine {chosen['median_cos']:.2f} at "
        f"{chosen['steps']} steps, W = {chosen['window']}, eta {chosen['eta']:g} (<= "
        f"{pre['cosine_max']}: "
        f"{'passed' if pre['passed'] else 'failed'})",
        "figures": figures_text,
        "subclaims": [
            {
                "claim": "the t-interpolation between the two endpoints does the work (JAGG above nearest-endpoint)",
                "verdict": interp,
                "figures": f"JAGG − nearest-endpoint {fmt(interp_diff, 4) if interp_diff is not None else 'n/a'}",
            }
        ],
    }
    body = "\n".join(
        [
            *page_head("JAGG: two backward passes per group, quality kept?", claim, verdict, f" ({reason})."),
            "The paper also credits the t-interpolation of the upstream gradients between the two endpoints; tested "
            "against the nearest-endpoint ablation (the same two backward passes, each step sent whole to the nearer "
            f"endpoint): **{interp}** ({interp_reason}"
            + (f": JAGG − nearest-endpoint {fmt(interp_diff, 4)}" if interp_diff is not None else "")
            + ").",
            "",
            f"Setup: {len(data['seeds'])} seeds ({data['seeds']}), {data['steps']} steps each at lr {data['lr']:g}, the "
            "same for every variant; evaluation: the mean colour reward of deterministic Euler ODE samples of 8 held-out "
            "prompts from fixed initial latents (the same for every variant and step). Non-inferiority: JAGG keeps the "
            f"quality when the 95% interval of (JAGG − exact) lies above −{MARGIN:.0%} of the exact baseline's mean gain. "
            "Intervals: Student t over seeds, differences paired by seed.",
            "",
            "```",
            " ".join(data["overrides"]),
            "```",
            "",
            f"Reproduce: {reproduce('jagg', data['seeds'])}.",
            "",
            "## Precondition: a realistic cosine",
            "",
            scan_md(data),
            "",
            *(["## Training at equal steps", "", results_md(data, stats), ""] if stats else []),
            *([confirmation_md((data, stats), confirm, *confirmed)] if confirmed else []),
        ]
    )
    return StudyResult(
        name="jagg",
        title="JAGG",
        verdict=verdict,
        summary=summary,
        markdown=body,
        data={
            "verdict": verdict,
            "reason": reason,
            "first_run_verdict": first_verdict,
            "margin": margin,
            "interpolation_verdict": interp,
            "statistics": stats_json(stats),
            "raw": data,
        },
        figures=figures(data),
    )
