"""One training run of a study: the shared trainer stepped to a compute budget (or a step count), evaluated with the
study's ruler along the way."""

from __future__ import annotations

from dataclasses import dataclass, field

from claim_studies.common import compute_units, timed_step


@dataclass
class RunRecord:
    """What a study keeps of one run.

    ``evals``: ``(compute units, CPU seconds, steps, score)`` at the start and after each evaluation mark;
    ``rows``: the logged per-step metrics the studies read (``grad_norm``, ``reward/mean``, ...).
    """

    evals: list[tuple[float, float, int, float]] = field(default_factory=list)
    rows: list[dict] = field(default_factory=list)
    extras: dict = field(default_factory=dict)

    @property
    def first(self) -> float:
        return self.evals[0][3]

    @property
    def final(self) -> float:
        return self.evals[-1][3]

    def to_json(self) -> dict:
        return {"evals": [list(e) for e in self.evals], "rows": self.rows, **self.extras}

    @classmethod
    def from_json(cls, data: dict) -> RunRecord:
        extras = {k: v for k, v in data.items() if k not in ("evals", "rows")}
        return cls(evals=[tuple(e) for e in data["evals"]], rows=list(data["rows"]), extras=extras)


def train(
    trainer,
    ruler,
    budget_units: float | None = None,
    steps: int | None = None,
    evals: int = 6,
    keep: tuple[str, ...] = ("step", "reward/mean", "grad_norm"),
) -> RunRecord:
    """Step ``trainer`` until the next step would exceed ``budget_units`` of compute (a step's cost is deterministic
    per method, so equal-compute variants never overshoot), or for ``steps`` steps; score the model with ``ruler``
    (``ruler(trainer) -> float``) before training and at ``evals`` equally spaced marks of the budget (the last at
    its end). Evaluation time is not counted."""
    if (budget_units is None) == (steps is None):
        raise ValueError("give exactly one of budget_units and steps")
    record = RunRecord()
    record.evals.append((0.0, 0.0, 0, ruler(trainer)))
    by_units = budget_units is not None
    total = float(budget_units) if by_units else float(steps)
    marks = [total * (i + 1) / evals for i in range(evals)]
    units, cpu, step = 0.0, 0.0, 0
    while True:
        metrics, seconds = timed_step(trainer, step)
        step_units = compute_units(metrics)
        units, cpu, step = units + step_units, cpu + seconds, step + 1
        record.rows.append({k: metrics.get(k) for k in keep})
        progress, ahead = (units, step_units) if by_units else (float(step), 1.0)
        last = progress + ahead > total * (1 + 1e-9)
        crossed = False
        while marks and progress >= marks[0] * (1 - 1e-9):
            marks.pop(0)
            crossed = True
        if crossed or last:
            record.evals.append((units, cpu, step, ruler(trainer)))
        if last:
            return record
