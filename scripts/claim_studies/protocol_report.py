"""The comparison protocol's page and README block, written from its stored data (issue 25 items 4 and 6).

``<out>/protocol.json`` (the full form) or ``protocol_quick.json`` (the quick form) holds what scripts/protocol.py
fixed before the runs (``fixed``: the pre-trained twin's base score, the target rule and value, the margin, when they
were fixed and when the first run started) and every run's evaluations (``runs``: the raw data). Everything the page
says is recomputed here from those (scripts/protocol_select.py ``select``), so ``scripts/claims.py --report-only``
rewrites it and tests/test_result_pages.py fails when the page and its data disagree.

Each method against the baseline is one claim in the fixed words (claim_studies/verdicts.py): *<method> beats the
baseline on the held-out score at the common budget of transformer passes by at least protocol.margin*, judged on the
paired 95 % Student t interval of (method - baseline) against the margin; *reproduced* also needs the pair's
Holm-adjusted p below 0.05. *Inconclusive* when the test could not decide: fewer than 5 seeds, or no method's held-out
score rose above the starting model's.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from claim_studies.common import MIN_SEEDS, table
from claim_studies.verdicts import INCONCLUSIVE, NOT_SHOWN, REPRODUCED, from_interval

SCRIPTS = Path(__file__).resolve().parents[1]
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))

from protocol_select import CANNOT_RANK, Point, Run, markdown, select  # noqa: E402

STEMS = {False: "protocol", True: "protocol_quick"}  # the full form's files, the quick form's
REGENERATE = "nice -n 10 .venv/bin/python scripts/claims.py --report-only"
INTERVALS = (
    "Intervals: 95 % Student t over seeds (scipy.stats.t through launcher/compare/stats.py; log scale for the "
    "positive quantities, passes and device-seconds); differences between methods paired by seed, p-values "
    "Holm-corrected over all pairs of methods."
)


def runs_of(data: dict) -> list[Run]:
    """The stored runs (``data["runs"]``: method, lr_scale, seed, source, points as [passes, device_s, val, test])."""
    return [
        Run(r["method"], float(r["lr_scale"]), int(r["seed"]), [Point(*p) for p in r["points"]], r["source"])
        for r in data["runs"]
    ]


def result_of(data: dict) -> dict:
    """The protocol's statistics, recomputed from the stored runs with the settings fixed before them."""
    fixed = data["fixed"]
    return select(runs_of(data), fixed["margin"], fixed["target"], data["baseline"])


def claims(data: dict, result: dict) -> list[dict]:
    """One claim per method against the baseline: the paired difference (method - baseline), its Holm p and word."""
    baseline, margin = data["baseline"], data["fixed"]["margin"] or 0.0
    base = min(r.points[0].test for r in runs_of(data))  # every run starts from the same weights and noise
    learned = any(m["test_at_budget"]["lo"] > base for m in result["methods"].values() if _finite(m["test_at_budget"]))
    found = []
    for p in result["pairs"]:
        if baseline not in (p["a"], p["b"]):
            continue
        d = p["difference"]
        sign = 1.0 if p["a"] != baseline else -1.0  # the pair is (a - b); the claim is (method - baseline)
        method = p["a"] if sign > 0 else p["b"]
        mean, lo, hi = sign * d["mean"], *sorted((sign * d["lo"], sign * d["hi"]))
        if d["n"] < MIN_SEEDS:
            word, why = INCONCLUSIVE, f"{d['n']} paired seeds (< {MIN_SEEDS})"
        elif not learned:
            word, why = INCONCLUSIVE, f"no method's held-out score rose above the starting model's {base:.4f}"
        else:
            word = from_interval(lo, hi, margin)
            why = f"interval against the margin {margin:g}"
            if word == REPRODUCED and not p["p_holm"] < 0.05:  # NaN (no spread over seeds) is not significant
                word, why = NOT_SHOWN, f"above the margin but not significant after Holm (p {p['p_holm']:.3g})"
        found.append({"method": method, "mean": mean, "lo": lo, "hi": hi, "p_holm": p["p_holm"], "verdict": word,
                      "why": why})  # fmt: skip
    return found


def page(data: dict) -> str:
    """``protocol.md`` (or ``protocol_quick.md``) from the stored data."""
    fixed, quick = data["fixed"], data["quick"]
    head = [
        "# Comparison protocol" + (" (quick form: its figures mean nothing)" if quick else ""),
        "",
        f"{'Measured' if data.get('runs') else 'Designed'} {data['date']}, {_design(data)}. Recipe: [comparing](../comparing.md#comparison-protocol); "
        f"reproduce: `{data['command']}`.",
        "",
        "**Fixed before the runs** (phase 1 of scripts/protocol.py, stored in this JSON before the sweep started): "
        f"the pre-trained twin's held-out score at step 0 was {fixed['base_score']:.4f} "
        f"(`rewardflow-eval evaluate.weights=base`, {fixed['base_prompts']} held-out prompts x "
        f"{fixed['samples_per_prompt']} samples); protocol.target = {fixed['rule']} = **{fixed['target']:.4f}**, "
        f"protocol.margin = **{fixed['margin']:g}** (conf/experiment/protocol.yaml); fixed at {fixed['fixed_at']}, "
        + (
            f"the sweep started at {fixed['sweep_started_at']}."
            if fixed["sweep_started_at"]
            else "before any method ran (`--fix-only`)."
        ),
    ]
    if not data.get("runs"):
        return "\n".join([*head, "", "No result yet: the sweep has not run or not finished.", "", _footer(data)])
    result = result_of(data)
    found = claims(data, result)
    starts = sorted({p[0][3] for p in (r["points"] for r in data["runs"])})
    same = all(abs(s - fixed["base_score"]) <= 1e-9 for s in starts)
    head[-1] += (
        " Every run's own step-0 held-out score equals it."
        if same
        else f" The runs' own step-0 held-out scores differ from it: {', '.join(f'{s:.4f}' for s in starts)}."
    )
    settings = sorted({(r["target"], r["margin"]) for r in data["runs"]}, key=str)
    head[-1] += (
        f" Every run's config holds protocol.target = {fixed['target']:g} and protocol.margin = {fixed['margin']:g}."
        if settings == [(fixed["target"], fixed["margin"])]
        else f" **The runs' configs hold other settings**: (target, margin) {settings}."
    )
    lines = [*head, "", INTERVALS, "", markdown(result, []).strip(), ""]
    lines += [
        f"## Each method against the baseline ({data['baseline']})",
        "",
        f"Claim: *the method beats {data['baseline']} on the held-out score at the common budget of transformer "
        f"passes by at least protocol.margin = {fixed['margin']:g}*. The difference is (method - {data['baseline']}), "
        "paired by seed; the words are [the claims' words](index.md#the-verdict-words) (*reproduced* also needs the "
        "Holm-adjusted p below 0.05; *inconclusive*: fewer than 5 seeds or no method learned).",
        "",
        table(
            ["method", f"method - {data['baseline']} (held-out at the budget)", "p (Holm)", "verdict", "why"],
            [[c["method"], _interval(c), f"{c['p_holm']:.3g}", f"**{c['verdict']}**", c["why"]] for c in found],
        ),
        "",
        _footer(data),
    ]
    return "\n".join(lines)


def readme_block(full: dict | None, quick: dict | None) -> str:
    """The README's block for the method comparison: the full form's result, or (none yet) the quick form's,
    labelled as such, or that nothing ran."""
    cost = "its cost: [comparing](docs/comparing.md#cost)"
    if full is not None and full.get("runs"):
        return _summary(full, "docs/results/protocol.md", "")
    note = (
        f"**No full run of the comparison protocol exists yet** ({len_design()} runs; {cost}), so no table here ranks "
        "the methods."
    )
    if full is not None:  # phase 1 ran: the target is fixed, no method has run under it
        f = full["fixed"]
        note += (
            f" Its target is fixed: protocol.target = {f['rule']} = {f['target']:.4f} from the pre-trained twin's "
            f"held-out score, margin {f['margin']:g} ([protocol.md](docs/results/protocol.md))."
        )
    if quick is None or not quick.get("runs"):
        return note + " Run: `nice -n 10 .venv/bin/python scripts/protocol.py`."
    return note + " " + _summary(quick, "docs/results/protocol_quick.md", "Only the quick form ran (the code path). ")


def len_design() -> int:
    """The full form's number of runs (scripts/protocol.py's grid)."""
    import protocol

    return len(protocol.SIZES["full"]["methods"]) * len(protocol.LR_SCALES) * len(protocol.SEEDS)


def _summary(data: dict, link: str, lead: str) -> str:
    result = result_of(data)
    words = "; ".join(f"{c['method']} {_interval(c)} **{c['verdict']}**" for c in claims(data, result))
    verdict = "**Cannot rank the methods**" if result["verdict"] == CANNOT_RANK else f"**{result['verdict']}**"
    quick = "; its figures mean nothing" if data["quick"] else ""
    return (
        f"{lead}The comparison protocol, {data['date']}: {_design(data)}{quick}. {verdict}. Held-out score at the common "
        f"budget of {result['budget_passes']:.0f} transformer passes, each method minus the baseline "
        f"{data['baseline']} (paired by seed, 95 % Student t, Holm over pairs): {words}. "
        f"[Details]({link}), written from its data by `{REGENERATE}`."
    )


def _design(data: dict) -> str:
    fixed = data["fixed"]
    return (
        f"{len(data['methods'])} methods x {len(data['lr_scales'])} learning rates (`optimizer.lr_scale` "
        f"{', '.join(f'{s:g}' for s in data['lr_scales'])}) x {len(data['seeds'])} seeds = "
        f"{len(data['runs']) if data.get('runs') else len(data['methods']) * len(data['lr_scales']) * len(data['seeds'])}"
        f" runs of {data['steps']} steps from `model=tiny_flux_pretrained` ({fixed['pretrain_steps']} pre-training "
        f"steps), size `{data['size']}`"
    )


def _footer(data: dict) -> str:
    wall = data.get("sweep_wallclock_s")
    took = f"; the sweep took {wall:.0f} s wall-clock" if wall is not None else ""
    return (
        f"---\nData: [{data['stem']}.json]({data['stem']}.json) ({data['machine']}{took}). Page written from it by "
        f"`{REGENERATE}`: edit scripts/claim_studies/protocol_report.py, not this page.\n"
    )


def _interval(c: dict) -> str:
    if not (math.isfinite(c["lo"]) and math.isfinite(c["hi"])):
        return f"{c['mean']:+.4f} (no interval)"
    return f"{c['mean']:+.4f} [{c['lo']:+.4f}, {c['hi']:+.4f}]"


def _finite(e: dict) -> bool:
    return all(e[k] is not None and math.isfinite(e[k]) for k in ("mean", "lo", "hi"))
