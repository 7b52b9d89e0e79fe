"""Which runs are finished: a run still going, crashed or stopped early would set the common budget and pull the
statistics with a curve that is not the method's (issue 25: a run at 8 of 10 steps set the budget unannounced).

A run is *incomplete* when W&B says it is not ``finished`` (crashed, failed, killed, running), or when its last
logged step is below its own ``trainer.steps``. Incomplete runs are left out of every figure and named in the
report, unless ``--include-unfinished`` keeps them in (still named).
"""

from __future__ import annotations

from dataclasses import dataclass

from launcher.compare.runs import REWARD, RunData

FINISHED = "finished"  # W&B's state of a run that ended normally


@dataclass(frozen=True)
class Incomplete:
    run: RunData
    reason: str  # "logged 8 of 10 steps", "W&B state crashed"

    def describe(self) -> str:
        return f"{self.run.name} ({self.reason}; {self.run.source})"


def why_incomplete(run: RunData) -> str | None:
    """Why ``run`` is not finished, or None when it is (or nothing says otherwise)."""
    state = (run.state or "").lower()
    if state and state != FINISHED:
        return f"W&B state {state}"
    planned = run.get("trainer.steps")
    steps = [int(r["step"]) for r in run.rows if r.get(REWARD) is not None]
    if isinstance(planned, int) and not isinstance(planned, bool) and steps and max(steps) + 1 < planned:
        return f"logged {max(steps) + 1} of {planned} steps"
    return None


def split(runs: list[RunData], include: bool) -> tuple[list[RunData], list[Incomplete]]:
    """(the runs to compare, the incomplete ones); with ``include`` the incomplete runs are compared too."""
    incomplete = [Incomplete(r, why) for r in runs if (why := why_incomplete(r)) is not None]
    if include:
        return runs, incomplete
    names = {id(i.run) for i in incomplete}
    return [r for r in runs if id(r) not in names], incomplete
