"""Which runs are compared, and as which groups.

Runs are grouped by ``method.name`` plus any config keys the user names (``--by method.name,method.window_size``);
the runs of one group are the seeds averaged into one curve. Two checks keep a comparison honest:

- the whole comparison must share one model, reward and prompt set (CONTEXT_KEYS), unless the user groups by them
  or allows the difference;
- inside a group, runs may differ only in the seed and in settings that do not change training (IGNORED); any other
  difference (e.g. two learning rates) would be silently averaged, so it is refused with the keys named.
"""

from __future__ import annotations

import fnmatch
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from launcher.compare.errors import CompareError
from launcher.compare.runs import ABSENT, RunData, config_get, flatten, show

DEFAULT_BY = ("method.name",)
CONTEXT_KEYS = ("model.name", "reward.name", "data.name")
# Config keys that differ between the seeds of one setting without changing what is trained: the seed itself,
# logging and output places, progress display, the cluster that ran it (its cost is on the compute axes), resuming,
# how often it evaluates (evaluation never changes training), how many samples and at which frame rate it shows.
IGNORED = (
    "trainer.seed",
    "trainer.progress",
    "trainer.sample_every",
    "trainer.num_sample_images",
    "trainer.threads",
    "trainer.resume*",
    "trainer.checkpoint*",
    "trainer.ckpt*",
    "output_root",
    "task_name",
    "logger.*",
    "cluster.*",
    "hydra.*",
    "eval.every",
    "eval.log_samples",
    "model.fps",
)
# The held-out evaluation is one ruler only if every run evaluates the same way: same prompts, samples, sampler
# steps, guidance, rewards. How often it evaluates, whether it evaluates EMA weights (a training choice) and how many
# of its samples it shows may differ.
RULER = "eval.*"
RULER_FREE = ("eval.every", "eval.use_ema", "eval.log_samples")


@dataclass
class Group:
    label: str  # "dance_grpo", or "flow_grpo_fast · window_size=2" with more --by keys
    values: tuple  # the --by values, in --by order
    runs: list[RunData]


def parse_where(items: list[str]) -> list[tuple[str, object]]:
    """``["model.name=tiny_flux", "method.window_size=2"]`` -> typed pairs (YAML typing, as on the Hydra CLI)."""
    import yaml

    out = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CompareError(f"--where {item!r}: expected KEY=VALUE, e.g. --where model.name=tiny_flux")
        try:
            typed = yaml.safe_load(value)
        except yaml.YAMLError:
            typed = value
        out.append((key.strip(), typed))
    return out


def apply_where(runs: list[RunData], where: list[tuple[str, object]]) -> list[RunData]:
    kept = runs
    for key, value in where:
        before = kept
        kept = [r for r in kept if _matches(r.get(key, ABSENT), value)]
        if not kept:
            seen = Counter(show(r.get(key, ABSENT)) for r in before)
            raise CompareError(
                f"--where {key}={show(value)} leaves no runs; the {len(before)} runs have {key} = {_counts(seen)}"
            )
    return kept


def _matches(actual, wanted) -> bool:
    return actual == wanted or show(actual) == show(wanted)


def group_runs(runs: list[RunData], by: list[str], allow_mixed: Sequence[str] = ()) -> list[Group]:
    """Split runs into groups by the ``by`` keys, after checking that they form one comparison."""
    if not runs:
        raise CompareError("no runs to compare")
    by = list(by or DEFAULT_BY)
    _check_identified(runs, by)
    _check_context(runs, by, allow_mixed)
    groups: dict[tuple, list[RunData]] = {}
    for run in runs:
        groups.setdefault(tuple(show(run.get(k, ABSENT)) for k in by), []).append(run)
    out = [Group(label=_label(by, values), values=values, runs=members) for values, members in groups.items()]
    for g in out:
        _check_seeds_only(g, by, allow_mixed)
    return sorted(out, key=lambda g: g.label)


def _label(by: list[str], values: tuple) -> str:
    parts = [v if k == "method.name" else f"{k.rsplit('.', 1)[-1]}={v}" for k, v in zip(by, values)]
    return " · ".join(parts)


def _check_identified(runs: list[RunData], by: list[str]) -> None:
    if "method.name" not in by:
        return
    unnamed = [r for r in runs if r.get("method.name") is None]
    if unnamed:
        listing = "; ".join(f"{r.name} ({r.source})" for r in unnamed[:5])
        raise CompareError(
            f"{len(unnamed)} run(s) have no method.name in their config, so their method is unknown: "
            f"{listing}. Runs made by `rewardflow` always have it; remove these paths, or group by "
            f"another key with --by KEY"
        )


def _allowed(key: str, patterns) -> bool:
    return any(fnmatch.fnmatchcase(key, p) for p in patterns)


def _check_context(runs: list[RunData], by: list[str], allow_mixed) -> None:
    differing = []
    for key in CONTEXT_KEYS:
        if key in by or _allowed(key, allow_mixed):
            continue
        seen = Counter(show(r.get(key, ABSENT)) for r in runs)
        if len(seen) > 1:
            differing.append((key, seen))
    if not differing:
        return
    what = "; ".join(f"{k} = {_counts(seen)}" for k, seen in differing)
    key, seen = differing[0]
    first = seen.most_common(1)[0][0]
    keys = ",".join(k for k, _ in differing)
    raise CompareError(
        f"these runs are not one comparison: they differ in {what}. Methods are compared on one model, reward and "
        f"prompt set. Fix: keep one with --where {key}={first}; or compare across them on purpose with "
        f"--by {','.join(by + [k for k, _ in differing])}; or ignore the difference with --allow-mixed {keys}"
    )


def check_ruler(runs: list[RunData], allow_mixed=()) -> None:
    """Refuse to compare held-out metrics measured differently (``eval.*`` settings other than RULER_FREE)."""
    flat = [flatten(r.config) for r in runs]
    keys = sorted(
        k
        for k in set().union(*flat)
        if fnmatch.fnmatchcase(k, RULER) and not _allowed(k, RULER_FREE) and not _allowed(k, allow_mixed)
    )
    differing = [(k, seen) for k in keys if len(seen := Counter(show(f.get(k, ABSENT)) for f in flat)) > 1]
    if not differing:
        return
    what = "; ".join(f"{k} = {_counts(seen)}" for k, seen in differing[:6])
    shown_keys = ",".join(k for k, _ in differing[:6])
    raise CompareError(
        f"these runs evaluate differently: {what}. A held-out metric compares methods only when "
        f"every run measures it the same way. Fix: keep one with --where {differing[0][0]}="
        f"{differing[0][1].most_common(1)[0][0]}; or compare on the training reward with --metric "
        f"reward/mean; or ignore the difference with --allow-mixed {shown_keys}"
    )


def _check_seeds_only(group: Group, by: list[str], allow_mixed) -> None:
    if len(group.runs) < 2:
        return
    flat = [flatten(r.config) for r in group.runs]
    keys = sorted(set().union(*flat))
    differing = []
    for key in keys:
        if key in by or _allowed(key, IGNORED) or _allowed(key, allow_mixed):
            continue
        seen = Counter(show(f.get(key, ABSENT)) for f in flat)
        if len(seen) > 1:
            differing.append((key, seen))
    if not differing:
        return
    shown = "; ".join(f"{k} = {_counts(seen)}" for k, seen in differing[:6])
    more = f" (and {len(differing) - 6} more keys)" if len(differing) > 6 else ""
    shown_keys = ",".join(k for k, _ in differing[:6])
    key, seen = differing[0]
    raise CompareError(
        f"group '{group.label}' mixes runs whose configs differ beyond the seed: {shown}{more}. Their curves would "
        f"be averaged as if they were seeds of one setting. Fix: split by them with --by {','.join(by)},{shown_keys}; "
        f"or keep one with --where {key}={seen.most_common(1)[0][0]}; or average anyway with --allow-mixed {shown_keys}"
    )


def _counts(seen: Counter) -> str:
    return ", ".join(f"{v} ({n} run{'s' if n > 1 else ''})" for v, n in seen.most_common())


def select_baseline(groups: list[Group], name: str | None) -> Group:
    """The group named by ``--baseline`` (its label, or its method name when that is unique); by default the
    DanceGRPO group when there is one (the baseline the accelerated methods are measured against), else the
    first group."""
    if name is None:
        named = [g for g in groups if g.label == "dance_grpo"]
        return named[0] if named else groups[0]
    exact = [g for g in groups if g.label == name]
    if exact:
        return exact[0]
    by_method = [g for g in groups if g.label.split(" · ")[0] == name]
    if len(by_method) == 1:
        return by_method[0]
    labels = ", ".join(repr(g.label) for g in groups)
    if by_method:
        raise CompareError(f"--baseline {name!r} matches several groups ({labels}); name one of them exactly")
    raise CompareError(f"--baseline {name!r} is not among the groups compared: {labels}")


def context_of(runs: list[RunData]) -> dict[str, str]:
    """The shared model / reward / prompt set, for the report header."""
    out = {}
    for key in CONTEXT_KEYS:
        values = sorted({show(config_get(r.config, key, ABSENT)) for r in runs})
        out[key] = values[0] if len(values) == 1 else ", ".join(values)
    return out
