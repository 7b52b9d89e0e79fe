"""Every results page written from the stored study data (issue 25 item 6): each ``docs/results/<study>.md`` and its
JSON's derived keys (verdict, summary, statistics, recomputed from its ``raw`` data with today's statistics),
``docs/results/index.md``, the comparison protocol's page (``protocol.md`` / ``protocol_quick.md`` from their JSON:
claim_studies/protocol_report.py), and the marked blocks of ``README.md`` and ``docs/results.md`` (``claims`` and ``protocol``, between
``<!-- NAME:begin -->`` and ``<!-- NAME:end -->``). :func:`render` builds them in memory, so a test can compare them
with the files (a hand edit or a stale figure fails it); :func:`write` writes them and the study plots.

Nothing here holds a figure: whatever ``<study>.json`` holds (a re-run study writes a new one) is what the pages say.
"""

from __future__ import annotations

import importlib
import json
import math
from pathlib import Path

from claim_studies import protocol_report
from claim_studies.common import ROOT, StudyResult, table
from claim_studies.verdicts import definitions_md

STUDIES = {"flash": "Flash-GRPO", "jagg": "JAGG", "eam": "EAM vs Adjoint Matching"}
CONFIRMATIONS = {"jagg": "jagg_confirm"}  # a study's rerun on fresh seeds, whose verdict must agree with the first's
REGENERATE = "nice -n 10 .venv/bin/python scripts/claims.py --report-only"


def finite(obj):
    """The data as JSON keeps it: NaN / inf as null, floats to 6 significant digits (applied before the write-up too,
    so a page rebuilt from the JSON is the page written after the runs), string keys."""
    if isinstance(obj, float):
        return float(f"{obj:.6g}") if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def study_md(result: StudyResult, meta: dict) -> str:
    links = "\n".join(f"![{stem}]({stem}.png)" for stem in result.figures) + "\n"
    footer = (
        f"\n---\nData from `{meta['command']}` on {meta['date']} ({meta['machine']}); training took "
        f"{meta['cpu_s']:.0f} CPU-seconds ({meta['wall_s']:.0f} s wall-clock). Data: "
        f"[{meta['study']}.json]({meta['study']}.json). Page written from it by `{REGENERATE}`: edit the study's "
        f"`scripts/claim_studies/{meta['study']}_report.py`, not this page.\n"
    )
    return result.markdown.rstrip() + "\n\n" + links + footer


def study_json(result: StudyResult, meta: dict) -> str:
    payload = finite(
        {"study": result.name, "verdict": result.verdict, "summary": result.summary, "meta": meta, **result.data}
    )
    # one line per top-level key: the verdict and summary read at a glance, the raw data stay compact
    lines = [f"{json.dumps(k)}: {json.dumps(v, separators=(',', ':'), ensure_ascii=False)}" for k, v in payload.items()]
    return "{\n" + ",\n".join(lines) + "\n}\n"


def write_up(name: str, raw: dict, out: Path) -> StudyResult:
    """``name``'s write-up of ``raw``, with its confirmation run's data when ``out`` holds one."""
    report = importlib.import_module(f"claim_studies.{name}_report")
    confirm = out / f"{CONFIRMATIONS[name]}.json" if name in CONFIRMATIONS else None
    if confirm is not None and confirm.exists():
        return report.write_up(raw, confirm=json.loads(confirm.read_text())["raw"])
    return report.write_up(raw)


def study_results(out: Path) -> dict[str, tuple[StudyResult, dict]]:
    """Every study whose JSON ``out`` holds: its write-up from the stored raw data, and the stored run metadata."""
    found = {}
    for name in STUDIES:
        path = out / f"{name}.json"
        if path.exists():
            saved = json.loads(path.read_text())
            found[name] = (write_up(name, saved["raw"], out), saved["meta"])
    return found


def claim_rows(found: dict, link: str) -> list[list[str]]:
    """One row per claim and per part of a claim the study judges on its own (``link``: the folder of the pages)."""
    rows = []
    for name, title in STUDIES.items():
        if name not in found:  # every claim keeps its row: the command that would fill it
            cmd = f"`nice -n 19 .venv/bin/python scripts/claims.py --studies {name}`"
            rows.append([title, "", "", "**not yet run at full size**", cmd])
            continue
        result, _ = found[name]
        s = result.summary
        rows.append(
            [f"[{title}]({link}{name}.md)", s["claim"], s["precondition"], f"**{result.verdict}**", s["figures"]]
        )
        for sub in s.get("subclaims", []):
            rows.append([f"{title}, part", sub["claim"], "as above", f"**{sub['verdict']}**", sub["figures"]])
    return rows


HEADER = ["study", "claim", "precondition", "verdict", "figures (95% Student t intervals over seeds)"]


def index_md(found: dict) -> str:
    return "\n".join(
        [
            "# The papers' claims on the CPU",
            "",
            "One row per claim (and per part of a claim judged on its own): the precondition its testbed had to "
            "meet, the verdict at this scale, and the figures behind it (95% Student t intervals over seeds). Each "
            "study's page has the detail.",
            "",
            table(HEADER, claim_rows(found, "")),
            "",
            "## The verdict words",
            "",
            "Fixed before the data (`scripts/claim_studies/verdicts.py`). A claim is one quantity with a 95% Student t "
            "interval over seeds, differences paired by seed, and a threshold fixed in advance: 0 for *A beats B*, "
            "minus a non-inferiority margin for *A keeps B's quality*.",
            "",
            definitions_md(),
            "",
            "## How a claim is tested",
            "",
            "- **Precondition first.** A claim can only show on a testbed that has what the claim is about (a reward "
            "that depends on the SDE step for Flash-GRPO's grouping, a JAGG gradient as imperfect as on real models, "
            "a target the ruler can tell apart for EAM). Each study measures that property before training, prints it "
            "and records it; a testbed that fails it gets *inconclusive* and says why.",
            "- **One ruler.** Every variant is scored the same way, never by its own training samples: deterministic "
            "ODE samples from fixed initial noise (the GRPO studies), or the distance to an analytic target on common "
            "random numbers (the SOC toy).",
            "- **Seeds and intervals.** At least 5 seeds per variant; means with 95% Student t intervals "
            "(`launcher/compare/stats.py`, log scale for times and ratios); two variants are compared by the per-seed "
            "difference (the same seed gives both the same prompts and, at first, the same noise).",
            "- Tiny models on CPUs: a verdict here says what the mechanism does on a testbed built to show it, not "
            "what a real model does.",
            "",
            "## Regenerating these pages",
            "",
            "Every page here, the claims block of the README and of `docs/results.md`, and the JSON's verdict, summary "
            "and statistics are written from the stored data (`docs/results/<study>.json`, its `raw` key) by one "
            "command, which trains nothing:",
            "",
            "```bash",
            REGENERATE,
            "```",
            "",
            "`tests/test_result_pages.py` rebuilds them in memory and fails when a file differs: edit the study's "
            "`scripts/claim_studies/<study>_report.py` (or re-run the study), never a page. A study re-run "
            "(`scripts/claims.py --studies <study>`) rewrites its JSON and then every page.",
            "",
        ]
    )


def claims_block(found: dict) -> str:
    """The claims table the README and docs/results.md carry between their ``claims`` markers."""
    dates = sorted({meta["date"] for _, meta in found.values()})
    return "\n".join(
        [
            f"The papers' claims on the CPU, written from [docs/results/](docs/results/index.md)'s data (runs of "
            f"{', '.join(dates)}) by `{REGENERATE}`; the verdict words are defined "
            "[there](docs/results/index.md#the-verdict-words).",
            "",
            table(HEADER, claim_rows(found, "docs/results/")),
        ]
    )


def replace_block(text: str, name: str, body: str) -> str:
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    if text.count(begin) != 1 or text.count(end) != 1:
        raise ValueError(f"expected one {begin} ... {end} block")
    head, rest = text.split(begin)
    _, tail = rest.split(end)
    return f"{head}{begin}\n{body}\n{end}{tail}"


def render(out: Path = ROOT / "docs" / "results") -> tuple[dict[Path, str], dict[str, dict]]:
    """Every generated file's text by path, and each study's figures (stem -> matplotlib figure)."""
    found = study_results(out)
    files, figures = {}, {}
    for name, (result, meta) in found.items():
        files[out / f"{name}.md"] = study_md(result, meta)
        files[out / f"{name}.json"] = study_json(result, meta)
        figures.update(result.figures)
        if name in CONFIRMATIONS and (out / f"{CONFIRMATIONS[name]}.json").exists():
            saved = json.loads((out / f"{CONFIRMATIONS[name]}.json").read_text())
            confirm = write_up(name, saved["raw"], Path("/nonexistent"))  # judged alone, without a confirmation
            close(confirm.figures)  # not drawn: the first run's page shows the confirmation as a table
            files[out / f"{CONFIRMATIONS[name]}.json"] = study_json(confirm, saved["meta"])
    files[out / "index.md"] = index_md(found)
    protocol = {}  # the comparison protocol's stored runs: the full form's and the quick form's
    for quick in (False, True):
        path = out / f"{protocol_stem(quick)}.json"
        if path.exists():
            protocol[quick] = json.loads(path.read_text())
            files[out / f"{protocol_stem(quick)}.md"] = protocol_report.page(protocol[quick])
    if out.resolve() == (ROOT / "docs" / "results").resolve():  # the repository's own pages
        blocks = {
            "claims": claims_block(found),
            "protocol": protocol_report.readme_block(protocol.get(False), protocol.get(True)),
        }
        for page, fix_links in ((ROOT / "README.md", False), (ROOT / "docs" / "results.md", True)):
            text = page.read_text()
            for name, block in blocks.items():
                text = replace_block(
                    text,
                    name,
                    block.replace("](docs/results/", "](results/").replace("](docs/", "](") if fix_links else block,
                )
            files[page] = text
    return files, figures


def protocol_stem(quick: bool) -> str:
    """The comparison protocol's files in docs/results: ``protocol`` (the full or 2h form), ``protocol_quick``."""
    return protocol_report.STEMS[quick]


def close(figures: dict) -> None:
    import matplotlib.pyplot as plt

    for fig in figures.values():
        plt.close(fig)


def write(out: Path) -> list[Path]:
    """Write every page :func:`render` builds and the study plots; returns the paths written."""
    files, figures = render(out)
    for path, text in files.items():
        path.write_text(text)
    for stem, fig in figures.items():
        fig.savefig(out / f"{stem}.png", dpi=100)
    close(figures)
    return sorted(files)
