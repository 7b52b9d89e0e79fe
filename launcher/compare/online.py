"""Runs from W&B (online) through the public API: a project, narrowed to groups, a sweep, tags or states.

``rewardflow -m`` puts a sweep's runs in the W&B group ``sweep-<date>_<time>``, so ``--group`` is the usual way to
select one sweep; ``--sweep`` is for W&B-native sweeps (agents). History is read with ``run.scan_history()``, which
returns every logged row (``run.history()`` samples 500 rows and would bias the curves).
"""

from __future__ import annotations

import logging
from typing import Any

from launcher.compare.errors import CompareError
from launcher.compare.runs import RunData, clean_rows, unwrap_config

log = logging.getLogger(__name__)
COMPARE_JOB_TYPE = "compare"  # the summary runs this tool logs (publish.py); never compared themselves


def wandb_filters(
    groups: list[str] | None = None,
    sweep: str | None = None,
    tags: list[str] | None = None,
    states: list[str] | None = None,
) -> dict[str, Any]:
    """The MongoDB-style filter ``Api.runs`` takes (keys: group, sweep, tags, state)."""
    filters: dict[str, Any] = {}
    if groups:
        filters["group"] = groups[0] if len(groups) == 1 else {"$in": list(groups)}
    if sweep:
        filters["sweep"] = sweep
    if tags:
        filters["tags"] = {"$in": list(tags)}
    if states:
        filters["state"] = {"$in": list(states)}
    return filters


def load_online(
    project: str,
    groups: list[str] | None = None,
    sweep: str | None = None,
    tags: list[str] | None = None,
    states: list[str] | None = None,
    api: Any = None,
) -> list[RunData]:
    """Runs of ``entity/project`` (or ``project`` under the default entity) matching the filters.

    ``api`` is a ``wandb.Api`` (made here when None); tests pass an object with the same ``runs()`` method."""
    if api is None:
        api = _make_api()
    filters = wandb_filters(groups, sweep, tags, states)
    try:
        found = list(api.runs(project, filters=filters, per_page=100))
    except Exception as e:  # network, auth, unknown project: one line, not a traceback
        raise CompareError(
            f"W&B: could not list runs of {project!r} with filters {filters}: {type(e).__name__}: {e}"
        ) from e
    out = []
    for run in found:
        if getattr(run, "job_type", None) == COMPARE_JOB_TYPE:
            continue
        out.append(_to_run_data(run))
    if not out:
        raise CompareError(
            f"W&B: no runs in {project!r} match {filters or 'the project'} "
            f"(check the group name on the W&B runs table; rewardflow sweeps are 'sweep-<date>_<time>')"
        )
    return out


def _make_api():
    try:
        import wandb

        return wandb.Api(timeout=60)
    except Exception as e:
        raise CompareError(
            f"W&B: cannot open the public API ({type(e).__name__}: {e}). Online comparison needs "
            f"WANDB_API_KEY or `wandb login`; local run folders work offline."
        ) from e


def _to_run_data(run: Any) -> RunData:
    try:
        rows = clean_rows(run.scan_history(page_size=1000))
    except Exception as e:
        raise CompareError(f"W&B: could not read the history of run {run.id} ({type(e).__name__}: {e})") from e
    url = getattr(run, "url", None) or "/".join(getattr(run, "path", []) or [run.id])
    return RunData(
        run_id=str(run.id),
        name=str(run.name or run.id),
        source=str(url),
        config=unwrap_config(dict(run.config or {})),
        rows=rows,
        group=getattr(run, "group", None),
        state=getattr(run, "state", None),
        tags=list(getattr(run, "tags", None) or []),
    )
