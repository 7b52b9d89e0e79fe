"""Settings of a comparison fixed in the runs' config before they ran (``protocol.target``, ``protocol.margin``;
launcher/protocol_config.py, docs/comparing.md#comparison-protocol).

A target chosen after looking at the curves can favour any method; one written into every run's config before the
runs cannot. ``rewardflow-compare`` uses it when every run agrees, and says where it came from; ``--target`` still
overrides it.
"""

from __future__ import annotations

from collections import Counter

from launcher.compare.errors import CompareError
from launcher.compare.runs import RunData

#: how the report names a value taken from the runs' config
FROM_CONFIG = "fixed before the runs: protocol.{key} = {value:g} in every run's config"


def fixed_in_config(runs: list[RunData], key: str) -> float | None:
    """``protocol.<key>`` when every run sets it to the same value; None when none sets it. Runs that disagree (or
    that set it only in part) are refused, naming the values: they were not run under one protocol."""
    values = Counter(_value(r.get(f"protocol.{key}")) for r in runs)
    if len(values) == 1:
        return next(iter(values))
    seen = ", ".join(f"{'null' if v is None else f'{v:g}'} ({n} run{'s' * (n > 1)})" for v, n in values.items())
    raise CompareError(
        f"these runs fix protocol.{key} differently: {seen}; they were not run under one protocol. Fix: keep one "
        f"protocol with --where protocol.{key}=<value>, or set the {key} for all of them"
        + (" with --target" if key == "target" else "")
    )


def _value(v) -> float | None:
    return None if v is None else float(v)
