"""Runs from local folders: a run directory, a sweep directory, any folder above them, or offline W&B files.

A run directory (``outputs/train/runs/<ts>/`` or ``outputs/train/multiruns/<ts>/<job>/``) holds ``metrics.jsonl``,
``.hydra/config.yaml`` + ``overrides.yaml`` and ``wandb/offline-run-*/run-<id>.wandb``. Both files carry the same
rows; ``metrics.jsonl`` is preferred (``source="auto"``) because it is plain JSON and is what the trainer writes
first; the W&B file is used when it is all there is (e.g. a copied ``wandb/`` folder) or when asked for.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from launcher.compare.errors import CompareError
from launcher.compare.runs import RunData, clean_rows, config_get, unwrap_config
from launcher.tracking import placement_file
from launcher.tracking.wandb_offline import find_offline_runs, read_offline_run

log = logging.getLogger(__name__)
SOURCES = ("auto", "jsonl", "wandb")


def load_local(paths: list[str | Path], source: str = "auto") -> list[RunData]:
    """Every run found under ``paths`` (each a run folder, a sweep folder, a folder above them or a .wandb file)."""
    if source not in SOURCES:
        raise CompareError(f"--source must be one of {', '.join(SOURCES)} (got {source!r})")
    runs: dict[str, RunData] = {}
    for raw in paths:
        path = Path(raw).expanduser()
        if not path.exists():
            raise CompareError(f"{path}: no such file or folder")
        found = _runs_under(path, source)
        if not found:
            what = {
                "auto": "metrics.jsonl or wandb/offline-run-*/run-*.wandb",
                "jsonl": "metrics.jsonl",
                "wandb": "wandb/offline-run-*/run-*.wandb",
            }[source]
            raise CompareError(f"{path}: no runs found (looked for {what} in it and in every folder below it)")
        for run in found:
            runs.setdefault(run.source, run)  # the same run named twice (a sweep and one of its jobs) counts once
    return list(runs.values())


def _runs_under(path: Path, source: str) -> list[RunData]:
    if path.is_file():
        if path.suffix == ".wandb":
            return [_from_wandb_files([path])]
        if path.name == "metrics.jsonl":
            return [_from_run_dir(path.parent)]
        raise CompareError(f"{path}: expected a run or sweep folder, a metrics.jsonl or a run-*.wandb file")
    run_dirs = sorted(p.parent for p in path.rglob("metrics.jsonl")) if source != "wandb" else []
    by_dir: dict[Path, list[Path]] = {}  # run folder -> its offline W&B run folders
    if source != "jsonl":
        for folder in find_offline_runs(path):
            by_dir.setdefault(folder.parent.parent if folder.parent.name == "wandb" else folder, []).append(folder)
    out = [_from_run_dir(d) for d in run_dirs]
    for run_dir, folders in sorted(by_dir.items()):
        if run_dir in run_dirs:
            continue
        out.append(_from_wandb_files(_same_run(run_dir, folders)))
    return out


def _same_run(run_dir: Path, folders: list[Path]) -> list[Path]:
    """A resumed run writes a new offline folder with the same run id; different ids in one folder are separate
    launches into the same directory, of which the newest is the one whose metrics.jsonl would be there."""
    files = sorted((f for d in folders for f in d.glob("run-*.wandb")), key=lambda f: f.parent.name)
    newest_id = files[-1].stem
    dropped = sorted({f.stem for f in files} - {newest_id})
    if dropped:
        log.warning(
            "%s holds several W&B runs; using the newest (%s), ignoring %s", run_dir, newest_id, ", ".join(dropped)
        )
    return [f for f in files if f.stem == newest_id]


def _from_wandb_files(files: list[Path]) -> RunData:
    """One run from its offline ``.wandb`` file(s), oldest first (a resume's rows replace the replayed steps)."""
    parts = [read_offline_run(f) for f in files]
    last = parts[-1]
    config: dict = {}
    for p in parts:
        config.update(unwrap_config(p.config))
    rows = clean_rows(row for p in parts for row in p.history)
    return RunData(
        run_id=last.run_id or files[-1].stem,
        name=last.name or last.run_id,
        source=str(files[-1].parent),
        config=config,
        rows=rows,
        group=last.group or None,
        tags=list(last.tags),
    )


def _from_run_dir(run_dir: Path) -> RunData:
    rows = []
    for n, line in enumerate((run_dir / "metrics.jsonl").read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            # a run killed mid-write leaves a partial last line; anything else is a corrupt file
            log.warning("%s/metrics.jsonl line %d is not JSON; skipped", run_dir, n)
    config = _hydra_config(run_dir)
    overrides = _yaml(run_dir / ".hydra" / "overrides.yaml") or []
    name = ",".join(str(o) for o in overrides if not str(o).startswith(("output_root=", "hydra.")))
    return RunData(
        run_id=str(run_dir),
        name=name or run_dir.name,
        source=str(run_dir),
        config=config,
        rows=clean_rows(rows),
        group=_group_of(run_dir, config),
        placement=placement_file.read(run_dir),
    )


def _hydra_config(run_dir: Path) -> dict:
    path = run_dir / ".hydra" / "config.yaml"
    if not path.exists():
        log.warning("%s has no .hydra/config.yaml: its method, model and reward are unknown", run_dir)
        return {}
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(path)
    try:
        container = OmegaConf.to_container(cfg, resolve=True)
    except Exception:  # interpolations that need Hydra's runtime (${now:...}, ${hydra:...}) stay as text
        container = OmegaConf.to_container(cfg, resolve=False)
    assert isinstance(container, dict)  # a Hydra run's config is a mapping
    return container


def _yaml(path: Path):
    if not path.exists():
        return None
    import yaml

    return yaml.safe_load(path.read_text())


def _group_of(run_dir: Path, config: dict) -> str:
    """The W&B group the trainer gives this run (launcher/train/trainer.py): logger.group, else ``sweep-<ts>`` for a run
    of a multirun, else the method name."""
    explicit = config_get(config, "logger.group")
    if explicit:
        return str(explicit)
    if run_dir.parent.parent.name == "multiruns" or (run_dir.parent / "multirun.yaml").exists():
        return f"sweep-{run_dir.parent.name}"
    return str(config_get(config, "method.name", run_dir.name))
