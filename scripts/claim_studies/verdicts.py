"""The four verdict words of every claim, fixed before any data (issue 25 item 6), and the one rule that turns an
interval into one of them.

A claim is tested by one quantity with a 95% Student t interval over seeds (``launcher/compare/stats.py``) and a
threshold fixed in advance: 0 for "A beats B", minus a non-inferiority margin for "A keeps B's quality". The words
say where the interval lies against the threshold, and whether the test could have shown the claim at all:

- *reproduced*: the whole interval is on the claimed side of the threshold;
- *refuted*: the whole interval is on the other side;
- *not shown*: the test ran as designed (precondition met, enough seeds) and its interval contains the threshold: the
  data do not separate the claim from its negation;
- *inconclusive*: the test could not decide: the testbed failed its precondition, too few seeds, nothing learned,
  or parts of one claim (testbeds, reward scales, a confirmation run) disagree.

The definitions paragraph on ``docs/results/index.md`` is :func:`definitions_md`, so the page and the code cannot
drift apart.
"""

from __future__ import annotations

REPRODUCED = "reproduced"
NOT_SHOWN = "not shown"
INCONCLUSIVE = "inconclusive"
REFUTED = "refuted"
VERDICTS = (REPRODUCED, NOT_SHOWN, INCONCLUSIVE, REFUTED)

MEANING = {
    REPRODUCED: "the whole 95% interval lies on the claimed side of the threshold fixed in advance (0 for *A beats B*, "
    "minus the non-inferiority margin for *A keeps B's quality*)",
    NOT_SHOWN: "the test ran as designed (precondition met, enough seeds) but the interval contains the threshold: the "
    "data do not separate the claim from its negation",
    INCONCLUSIVE: "the test could not decide: the testbed failed its precondition, too few seeds, no variant learned, "
    "or the parts of one claim (testbeds, reward scales, a confirmation run on fresh seeds) disagree",
    REFUTED: "the whole interval lies on the other side of the threshold",
}


def from_interval(lo: float, hi: float, threshold: float = 0.0) -> str:
    """The verdict of a claim that a quantity exceeds ``threshold`` from its interval ``[lo, hi]`` (a test that ran
    as designed; the caller returns :data:`INCONCLUSIVE` itself when it did not). No interval (one seed, NaN ends)
    decides nothing: not shown."""
    if not (lo == lo and hi == hi):  # NaN: no interval
        return NOT_SHOWN
    if lo > threshold:
        return REPRODUCED
    if hi < threshold:
        return REFUTED
    return NOT_SHOWN


def agreed(verdicts) -> str:
    """One word for a claim tested in parts: the verdict every part agrees on, else (parts disagree, or none was
    tested) inconclusive."""
    tested = set(verdicts)
    return tested.pop() if len(tested) == 1 else INCONCLUSIVE


def definitions_md() -> str:
    """The paragraph that defines the words, for ``docs/results/index.md``."""
    return "\n".join(f"- *{word}*: {MEANING[word]}." for word in VERDICTS)
