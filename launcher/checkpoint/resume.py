"""Where a run starts from (docs/resume.md).

1. Its own run dir's newest usable checkpoint (``trainer.resume=true``, the default): a restarted command with the
   same ``hydra.run.dir`` or a requeued SLURM job continues where it stopped, in the same ``metrics.jsonl`` and
   the same W&B run. With ``trainer.resume=false`` the run dir's earlier checkpoints are moved aside instead.
2. Otherwise ``trainer.resume_from=<run dir or checkpoint folder>``: a new run (this run dir, a new W&B run) that
   starts from another run's checkpoint: weights, optimizer, step, data position and RNG states, with that run's
   metric rows up to the checkpoint copied in, so its curves start at step 0. A run dir means its newest usable
   checkpoint. Because (1) comes first, a requeued job started with ``resume_from`` continues from its own progress.
3. Otherwise step 0.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from launcher.checkpoint import run_identity
from rewardflow.distributed import World, barrier
from rewardflow.errors import ConfigError
from rewardflow.jsonl import read_rows

log = logging.getLogger(__name__)

KEY = "trainer.resume_from"


@dataclass
class StartPoint:
    checkpoint: Path
    meta: dict[str, Any]
    own_run: bool  # False: another run's checkpoint (trainer.resume_from)


def resume_from_candidates(value: str) -> list[Path]:
    """The checkpoint folders ``trainer.resume_from`` names, oldest first: one checkpoint, or every complete
    checkpoint of a run dir (or of its ``checkpoints/`` folder). Raises :class:`ConfigError` naming the key."""
    from launcher.checkpoint.manager import MARKER, CheckpointManager  # torch.distributed.checkpoint: seconds to import

    path = Path(value).expanduser()
    if (path / MARKER).is_file():
        return [path]
    if path.name.startswith("step_") and path.is_dir():
        raise ConfigError(
            f"{KEY}={value}: this checkpoint is incomplete (no {MARKER} file: its writer stopped "
            f"before the end). Fix: point {KEY} at its run dir to use the newest complete one"
        )
    root = path if path.name == "checkpoints" else path / "checkpoints"
    if not root.is_dir():
        what = "no such folder" if not path.exists() else "neither a run dir (no checkpoints/ folder) nor a checkpoint"
        raise ConfigError(
            f"{KEY}={value}: {what}. Fix: {KEY}=<run dir> (its newest checkpoint) or "
            f"{KEY}=<run dir>/checkpoints/step_<N> (that checkpoint)"
        )
    found = CheckpointManager(root, World()).complete()
    if not found:
        raise ConfigError(
            f"{KEY}={value}: {root} holds no complete checkpoint. Fix: point {KEY} at a run that "
            f"wrote one (trainer.ckpt_every, and the end of every run)"
        )
    return found


def check_resume_from(cfg: DictConfig) -> None:
    """Config check (before any model is built): ``trainer.resume_from`` names checkpoints of the same method and
    model (launcher/checkpoint/run_identity.py)."""
    value = cfg.trainer.resume_from
    if value:
        run_identity.check_resume_from(cfg, resume_from_candidates(str(value))[-1])


def load_start_point(
    cfg: DictConfig,
    checkpoints,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    extra: dict[str, torch.Tensor] | None = None,
    states: dict[str, Any] | None = None,
) -> StartPoint | None:
    """Load the run's start point (module docstring) into ``model``, ``optimizer``, the method's ``extra``
    tensors and the trainer's ``states`` (EMA, LR schedule) through ``checkpoints`` (the run's
    :class:`~launcher.checkpoint.manager.CheckpointManager`); None for step 0."""
    from launcher.checkpoint.manager import CheckpointManager, NoUsableCheckpoint

    t = cfg.trainer
    if not t.resume:
        _set_aside_old_checkpoints(checkpoints)
    else:
        loaded = checkpoints.load_newest_usable(model, optimizer, extra=extra, states=states)
        if loaded is not None:
            if t.get("resume_from") and checkpoints.world.is_main:
                log.info(
                    "%s is not used: this run dir has its own checkpoints, so the run continues from its own "
                    "progress (%s)",
                    KEY,
                    loaded[0],
                )
            path, meta = loaded
            return StartPoint(path, meta, own_run=True)
    if not t.get("resume_from"):
        return None
    candidates = resume_from_candidates(str(t.resume_from))
    other = CheckpointManager(candidates[0].parent, checkpoints.world)
    try:
        found = other.load_newest_usable(model, optimizer, candidates, set_aside=False, extra=extra, states=states)
    except NoUsableCheckpoint as e:
        raise ConfigError(f"{KEY}={t.resume_from}: {e}") from None
    assert found is not None  # candidates is not empty: it either loads one or raises NoUsableCheckpoint
    path, meta = found
    if checkpoints.world.is_main:
        log.info("starting from %s (step %d of another run; %s)", path, meta["step"], KEY)
    return StartPoint(path, meta, own_run=False)


def _set_aside_old_checkpoints(checkpoints) -> None:
    """``trainer.resume=false`` in a run dir with checkpoints: move them out of the way (kept, renamed), so that
    neither pruning nor a later automatic resume mixes them with this run's."""
    if checkpoints.world.is_main and checkpoints.complete():
        aside = checkpoints.root.with_name(f"{checkpoints.root.name}.before-{time.strftime('%Y%m%d-%H%M%S')}")
        os.replace(checkpoints.root, aside)
        log.warning("trainer.resume=false: this run dir's earlier checkpoints were moved to %s", aside)
    barrier()


def copy_history(start: StartPoint, run_dir: Path) -> int:
    """Write the other run's metric rows up to the checkpoint's step into this run's ``metrics.jsonl`` (replacing
    it); returns the number of rows. The run logger then sends them to this run's new W&B run."""
    source = start.checkpoint.parent.parent / "metrics.jsonl"
    rows = [row for row in read_rows(source) if int(row["step"]) <= int(start.meta["step"])]  # the source is only read
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return len(rows)
