"""Every results page is written from its stored data (issue 25 item 6): rebuilt in memory from
``docs/results/*.json``, each study page, ``docs/results/index.md``, the JSON's derived keys and the claims blocks of
the README and ``docs/results.md`` equal the files, so a hand edit or a figure left stale after a re-run fails here
(the fix: ``nice -n 10 .venv/bin/python scripts/claims.py --report-only``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))


@pytest.fixture(scope="module")
def rendered():
    import matplotlib.pyplot as plt

    from claim_studies import pages

    files, figures = pages.render(ROOT / "docs" / "results")
    plt.close("all")
    return files


def test_every_page_matches_its_data(rendered):
    studies = ("flash", "jagg", "eam")
    expected = {f"{s}.{kind}" for s in studies for kind in ("md", "json")} | {"index.md", "README.md"}
    assert expected <= {p.name for p in rendered}
    stale = [str(p.relative_to(ROOT)) for p, text in rendered.items() if p.read_text() != text]
    assert not stale, f"pages differ from their data: {stale}; run scripts/claims.py --report-only"


def test_pages_use_only_the_fixed_verdict_words(rendered):
    from claim_studies.verdicts import VERDICTS

    for name in ("flash", "jagg", "eam", "jagg_confirm"):
        data = json.loads((ROOT / "docs" / "results" / f"{name}.json").read_text())
        assert data["verdict"] in VERDICTS
        for sub in data["summary"].get("subclaims", []):
            assert sub["verdict"] in VERDICTS
    index = rendered[ROOT / "docs" / "results" / "index.md"]
    for word in VERDICTS:
        assert f"- *{word}*:" in index  # each word defined on the page
    for old in ("not reproduced", "inconclusive at this scale"):
        assert all(old not in text for text in rendered.values()), old


def test_a_hand_edit_of_a_figure_is_caught(rendered):
    """The check compares whole pages: changing one digit of a figure in the README's claims block makes it differ."""
    readme = ROOT / "README.md"
    text = rendered[readme]
    block = text.split("<!-- claims:begin -->")[1].split("<!-- claims:end -->")[0]
    digit = next(i for i, c in enumerate(block) if c.isdigit() and block[i - 1] == ".")
    edited = block[:digit] + str((int(block[digit]) + 1) % 10) + block[digit + 1 :]
    assert text.replace(block, edited) != readme.read_text()


def test_claim_rows_follow_the_data_not_the_code():
    """A page says what its JSON holds: a copy of a study's data with one seed's result changed gives another
    figure on the regenerated page (nothing is hard-coded)."""
    from claim_studies import pages

    src = ROOT / "docs" / "results" / "flash.json"
    saved = json.loads(src.read_text())
    before = pages.write_up("flash", saved["raw"], Path("/nonexistent"))
    itg = saved["raw"]["twin"]["runs"]["itg"]["records"][0]["evals"][-1]
    itg[3] -= 0.5  # one ITG seed ends far lower
    after = pages.write_up("flash", saved["raw"], Path("/nonexistent"))
    pages.close(before.figures)
    pages.close(after.figures)
    assert before.summary["subclaims"][1]["figures"] != after.summary["subclaims"][1]["figures"]


def test_the_rule_from_interval_to_word():
    from claim_studies.verdicts import INCONCLUSIVE, NOT_SHOWN, REFUTED, REPRODUCED, agreed, from_interval

    assert from_interval(0.01, 0.02) == REPRODUCED
    assert from_interval(-0.02, -0.01) == REFUTED
    assert from_interval(-0.01, 0.02) == NOT_SHOWN
    # non-inferiority: the threshold is minus the margin
    assert from_interval(-0.002, 0.02, threshold=-0.003) == REPRODUCED
    assert from_interval(-0.005, 0.02, threshold=-0.003) == NOT_SHOWN
    assert from_interval(float("nan"), float("nan")) == NOT_SHOWN
    assert agreed([REPRODUCED, REPRODUCED]) == REPRODUCED
    assert agreed([REPRODUCED, NOT_SHOWN]) == INCONCLUSIVE


def test_the_comparison_protocol_page_and_blocks_come_from_its_stored_data(rendered):
    """docs/results/protocol.json (a full run) or protocol_quick.json (the quick form only) lies behind
    protocol[_quick].md and the protocol blocks of the README and docs/results.md; the README says which form ran."""
    from protocol import TARGET_FRACTION

    results = ROOT / "docs" / "results"
    stored = [stem for stem in ("protocol", "protocol_quick") if (results / f"{stem}.json").exists()]
    assert stored, "no stored protocol data: run scripts/protocol.py (or --quick --out docs/results)"
    for stem in stored:
        assert results / f"{stem}.md" in rendered
    block = rendered[ROOT / "README.md"].split("<!-- protocol:begin -->")[1].split("<!-- protocol:end -->")[0]
    full = (results / "protocol.json").exists() and json.loads((results / "protocol.json").read_text())["runs"]
    assert ("No full run of the comparison protocol exists yet" in block) != bool(full)
    if not full:
        assert "Only the quick form ran" in block and "its figures mean nothing" in block
    assert "<!-- protocol:begin -->" in rendered[ROOT / "docs" / "results.md"]
    for stem in stored:  # fixed before the runs, and every run was given what was fixed
        data = json.loads((results / f"{stem}.json").read_text())
        fixed = data["fixed"]
        assert fixed["target"] == round(fixed["base_score"] + TARGET_FRACTION * (1 - fixed["base_score"]), 4)
        assert fixed["sweep_started_at"] is None or fixed["fixed_at"] <= fixed["sweep_started_at"]
        assert all((r["target"], r["margin"]) == (fixed["target"], fixed["margin"]) for r in data["runs"])


def test_a_changed_protocol_run_changes_its_page():
    """The protocol page is recomputed from the stored runs: the final held-out scores changed, another page (every
    run's: run 0 may be at a learning rate that validation did not pick, whose final score no table shows)."""
    from claim_studies import protocol_report

    results = ROOT / "docs" / "results"
    stored = [json.loads((results / f"{s}.json").read_text()) for s in ("protocol", "protocol_quick")
              if (results / f"{s}.json").exists()]  # fmt: skip
    data = next(d for d in stored if d["runs"])  # the full form's once it ran, the quick form's until then
    before = protocol_report.page(data)
    for run in data["runs"]:
        run["points"][-1][3] += 0.25
    assert protocol_report.page(data) != before
