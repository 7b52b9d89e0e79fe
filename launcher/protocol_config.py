"""Config of a comparison fixed before its runs (``protocol.*``; docs/comparing.md#comparison-protocol).

A comparison whose target or margin is picked after looking at the results can be made to say anything; written into
every run's config before the runs, they are part of what the runs are, and ``rewardflow-compare`` and
scripts/protocol.py read them back from there. Nothing in training reads them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass
class ProtocolConfig:
    # the held-out score that counts as reached (compute to reach it, speedups); null: rewardflow-compare's own
    # default, the lowest final value among the baseline's seeds, chosen after the fact
    target: Optional[float] = None
    # the smallest difference in the held-out score that matters: a method ranks above another only when their
    # paired difference is significant (Holm) and at least this large; null: any significant difference (finite, >= 0)
    margin: Optional[float] = None
