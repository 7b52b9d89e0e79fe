"""Preemption-safe checkpoints with torch DCP, written by every rank.

Layout under ``<run_dir>/checkpoints/``::

    step_00000050/            a complete checkpoint (visible only once whole)
        .metadata, __*_0.distcp   DCP shards: trainable weights (full model or LoRA adapter) + optimizer
                                  (+ the method's extra state, e.g. DiffusionNFT's lagging sampling policy,
                                  and the trainer's other states: the EMA of the weights, the LR schedule)
        rank_00000.pt ...     per-rank state: RNG states (torch, CUDA, numpy, python) as tensors and plain values
        meta.json             step, data position, W&B run id, cumulative wall-clock, world size, run identity,
                              every file's size and sha256 (launcher/checkpoint/checksums.py)
        COMPLETE              written last, before the rename
    .step_00000100.tmp/       a checkpoint being written (never picked up by resume)
    step_00000150.damaged-<time>/   a checkpoint resume found unreadable, set aside (kept for inspection)

A checkpoint is written into a temporary folder; rank 0 writes ``COMPLETE`` after every rank has finished and
then renames the folder into place, so a crash at any point leaves either the old set of checkpoints or the new
one, never a half-written checkpoint that resume would pick (``latest`` only accepts folders holding ``COMPLETE``).

Resume takes the newest checkpoint that is whole and readable: a damaged one (a truncated shard, a missing rank
file, a file that is not what rewardflow writes) is set aside with a warning naming it and the previous one is used
(:meth:`CheckpointManager.load_newest_usable`). Nothing in a checkpoint is unpickled beyond plain data
(:mod:`launcher.checkpoint.safe_dcp`, :mod:`launcher.checkpoint.rng_state`), so a crafted run folder cannot run code.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import time
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException  # a BaseException: caught by name
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict

from launcher.checkpoint import checksums, rng_state
from launcher.checkpoint.async_save import AsyncSaver
from launcher.checkpoint.safe_dcp import SafeFileSystemReader, SafeLoadPlanner, read_metadata
from rewardflow.distributed import World, all_gather_objects, any_rank, barrier, broadcast_object
from rewardflow.errors import ConfigError

log = logging.getLogger(__name__)

_STEP = re.compile(r"^step_(\d{8})$")
MARKER = "COMPLETE"


def _step_of(checkpoint: Path) -> int:
    match = _STEP.match(checkpoint.name)
    assert match is not None  # only called on names _STEP matched
    return int(match.group(1))


def _rank_file(path: Path, rank: int) -> Path:
    return path / f"rank_{rank:05d}.pt"


@contextlib.contextmanager
def _dcp_quiet():
    """DCP warns on every single-process save and load that it is "assuming the intent is to save in a single
    process" (even when told so with ``no_dist``); a single-process run is the intended case here."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")
        yield


_RAISED = re.compile(r"^\w*(Error|Exception): ")
#: what DCP says when a whole checkpoint does not fit the model and optimizer it is loaded into (another model,
#: LoRA vs full fine-tuning): the run's config, not damage, so the checkpoint is never set aside for it
_MISFIT = re.compile(r"Missing key in checkpoint state_dict|Size mismatch between saved")


def _first_line(error: BaseException) -> str:
    """DCP's errors carry every rank's traceback; the first ``...Error: message`` line says what went wrong."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    raised = [line for line in lines if _RAISED.match(line)]
    errors = [line for line in lines if "Error" in line.split(":")[0]]
    return (raised or errors or lines or [""])[0][:300]


def _single_process() -> bool:
    return not (dist.is_available() and dist.is_initialized())


def load_state(state: dict, path: Path | str) -> None:
    """Fill ``state`` in place from the DCP checkpoint at ``path`` (through the safe reader and planner: no pickled
    objects are loaded), quietly and without a process group in a single process. Collective under FSDP."""
    with _dcp_quiet():
        dcp.load(
            state,
            storage_reader=SafeFileSystemReader(str(path)),
            planner=SafeLoadPlanner(),
            no_dist=_single_process(),
        )


def _fsync_write(path: Path, text: str) -> None:
    with open(path, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())


class CheckpointManager:
    """Save / find / load checkpoints of a model (possibly FSDP2-sharded) and its optimizer.

    Only trainable parameters are saved (``ignore_frozen_params``): the full model when fine-tuning everything, the
    adapter when training LoRA; frozen weights come back from the pretrained checkpoint at start-up.
    """

    def __init__(
        self,
        root: str | Path,
        world: World,
        keep_last: int = 2,
        asynchronous: bool = False,
        checksums: bool = True,
    ):
        self.root = Path(root)
        self.world = world
        self.keep_last = max(1, keep_last)
        self.checksums = (
            checksums  # record every file's size and sha256 in meta.json (launcher/checkpoint/checksums.py)
        )
        self.saver = AsyncSaver() if asynchronous else None  # launcher/checkpoint/async_save.py

    # -- finding ------------------------------------------------------------------------------------------------
    def complete(self) -> list[Path]:
        if not self.root.is_dir():
            return []
        found = [p for p in self.root.iterdir() if _STEP.match(p.name) and (p / MARKER).is_file()]
        return sorted(found, key=_step_of)

    def latest(self) -> Path | None:
        done = self.complete()
        return done[-1] if done else None

    # -- saving -------------------------------------------------------------------------------------------------
    def save(
        self,
        step: int,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        meta: dict[str, Any],
        extra: dict[str, torch.Tensor] | None = None,
        states: dict[str, Any] | None = None,
    ) -> Path:
        """Collective: every rank must call it with the same ``step``. ``extra``: more tensors (possibly
        DTensors) saved under ``method``. ``states``: more stateful objects by name (``state_dict`` /
        ``load_state_dict``, e.g. an EMA whose tensors are sharded like the weights, a torch LR scheduler), saved in
        the same DCP checkpoint; ``meta.json`` lists their names. Asynchronous managers return once the state is
        staged in host memory; the checkpoint appears (is committed) when the background write has finished
        (:meth:`wait`)."""
        states = dict(states or {})
        t0 = time.perf_counter()
        self.wait()  # the previous save is committed before this one starts
        final = self.root / f"step_{step:08d}"
        tmp = self.root / f".step_{step:08d}.tmp"
        if self.world.is_main:
            shutil.rmtree(tmp, ignore_errors=True)  # leftovers of a writer that died
            tmp.mkdir(parents=True)
        barrier()
        model_sd, optim_sd = get_state_dict(model, optimizer, options=StateDictOptions(ignore_frozen_params=True))
        state = {"model": model_sd, "optim": optim_sd, **({"method": extra} if extra else {}), **states}
        rng_state.save(_rank_file(tmp, self.world.rank))
        meta = {**meta, "step": step, "world_size": self.world.world_size, "states": sorted(states)}
        commit = (lambda: self._commit(tmp, final, meta)) if self.world.is_main else None
        if self.saver is not None:
            with _dcp_quiet():
                self.saver.start(state, str(tmp), commit)
            log.info("checkpoint %s staged in %.2f s, writing in the background", final, time.perf_counter() - t0)
            return final
        with _dcp_quiet():
            dcp.save(state, checkpoint_id=str(tmp), no_dist=_single_process())
        if self.checksums:
            checksums.write_own(tmp, self.world.rank)  # every rank its own files, before the ranks meet
        barrier()
        if commit is not None:
            commit()
        barrier()
        log.info("checkpoint %s written in %.2f s", final, time.perf_counter() - t0)
        return final

    def wait(self) -> None:
        """Collective: block until an asynchronous save in flight is written and committed, on every rank (no-op
        without one)."""
        if self.saver is not None and self.saver.wait():
            barrier()  # rank 0's commit is visible to all once they pass

    def _commit(self, tmp: Path, final: Path, meta: dict[str, Any]) -> None:
        """Rank 0, once every rank's shards are written: the files' checksums, ``meta.json``, ``COMPLETE``, the rename,
        pruning."""
        if self.checksums:
            meta = {**meta, "files": checksums.collect(tmp)}
        _fsync_write(tmp / "meta.json", json.dumps(meta))
        _fsync_write(tmp / MARKER, f"{meta['step']}\n")
        if final.exists():  # a re-save of the same step (replayed after resume)
            shutil.rmtree(final)
        os.replace(tmp, final)
        self._prune()

    def _prune(self) -> None:
        for old in self.complete()[: -self.keep_last]:
            shutil.rmtree(old, ignore_errors=True)

    # -- loading ------------------------------------------------------------------------------------------------
    def problem(self, path: Path) -> str | None:
        """Why checkpoint ``path`` cannot be loaded, or None if it looks whole (cheap: no tensor is read).

        Checks the files DCP and :meth:`load` read: ``meta.json``, one RNG file per rank (read as plain data), the
        DCP metadata (read as plain data), and every shard file at least as long as the metadata says.
        """
        try:
            meta = json.loads((path / "meta.json").read_text())
            world_size = int(meta["world_size"])
            int(meta["step"])
            for rank in range(world_size):
                rng_state.load(_rank_file(path, rank))
            needed: dict[str, int] = {}
            for info in read_metadata(path).storage_data.values():
                needed[info.relative_path] = max(needed.get(info.relative_path, 0), info.offset + info.length)
            for name, size in sorted(needed.items()):
                have = (path / name).stat().st_size
                if have < size:
                    return f"{name} is truncated ({have} of {size} bytes)"
            if isinstance(meta.get("files"), dict):
                return checksums.size_problem(path, meta["files"])
        except Exception as e:  # noqa: BLE001 - any failure to read it means the checkpoint cannot be used
            return f"{type(e).__name__}: {e}"
        return None

    def load(
        self,
        path: Path,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        extra: dict[str, torch.Tensor] | None = None,
        states: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Restore weights, optimizer, the ``extra`` tensors (in place), the ``states`` the checkpoint holds (its
        meta's ``states``; a checkpoint without one leaves that object as it is) and this rank's RNG state; return
        the checkpoint's meta.

        Collective. Every file is read as plain data (see :mod:`launcher.checkpoint.safe_dcp`); a checkpoint of another world
        size is a :class:`ConfigError`.
        """
        meta = json.loads((path / "meta.json").read_text())
        if meta["world_size"] != self.world.world_size:
            raise ConfigError(
                f"checkpoint {path} was written by {meta['world_size']} ranks, this job has "
                f"{self.world.world_size}. Fix: resume with the same number of ranks "
                f"(cluster.tasks_per_node x cluster.nodes), or trainer.resume=false to start over"
            )
        opts = StateDictOptions(ignore_frozen_params=True)
        model_sd, optim_sd = get_state_dict(model, optimizer, options=opts)
        saved = set(meta.get("states", []))
        state = {
            "model": model_sd,
            "optim": optim_sd,
            **({"method": extra} if extra else {}),
            **{k: v for k, v in (states or {}).items() if k in saved},
        }
        load_state(state, path)
        set_state_dict(
            model,
            optimizer,
            model_state_dict=state["model"],
            optim_state_dict=state["optim"],
            options=StateDictOptions(ignore_frozen_params=True, strict=False),
        )
        rng_state.restore(rng_state.load(_rank_file(path, self.world.rank)))
        log.info("resumed from %s (step %d)", path, meta["step"])
        return meta

    def load_newest_usable(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        candidates: list[Path] | None = None,
        set_aside: bool = True,
        extra: dict[str, torch.Tensor] | None = None,
        states: dict[str, Any] | None = None,
    ) -> tuple[Path, dict[str, Any]] | None:
        """Load the newest of ``candidates`` (default: this run's complete checkpoints) that loads; None if there are
        none. A damaged one is skipped with a warning naming it and, with ``set_aside``, renamed out of the set
        (so that pruning never keeps it in place of a good one). Collective: rank 0 checks, every rank loads, and
        all agree on the outcome. Raises :class:`NoUsableCheckpoint` when every candidate is damaged."""
        candidates = list(self.complete() if candidates is None else candidates)
        damaged: list[tuple[Path, str]] = []
        for path in reversed(candidates):
            reason = broadcast_object(self.problem(path) if self.world.is_main else None)
            if reason is None:
                reason = self._content_problem(path)
            if reason is None:
                misfit = None
                try:
                    meta = self.load(path, model, optimizer, extra, states)
                except ConfigError:
                    raise
                except (Exception, CheckpointException) as e:  # noqa: BLE001 - damage the cheap check missed
                    reason = f"{type(e).__name__}: {_first_line(e)}"
                    misfit = reason if _MISFIT.search(str(e)) else None
                misfit = next((m for m in all_gather_objects(misfit) if m), None)
                if misfit is not None:
                    raise CheckpointMisfit(path, misfit)
                if not any_rank(reason is not None):
                    if damaged and self.world.is_main:
                        log.warning("resuming from %s, the newest usable checkpoint", path)
                    return path, meta
                reason = reason or "another rank could not load it"
            damaged.append((path, reason))
            if self.world.is_main:
                log.warning("checkpoint %s is damaged and is skipped (%s)", path, reason)
                if set_aside:
                    aside = path.with_name(f"{path.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
                    os.replace(path, aside)
                    log.warning("set aside as %s (kept for inspection; delete it when done)", aside)
            barrier()
        if damaged:
            raise NoUsableCheckpoint(damaged)
        return None

    def _content_problem(self, path: Path) -> str | None:
        """Collective: a file whose sha256 differs from the one ``meta.json`` records (each rank checks its share)."""
        files = json.loads((path / "meta.json").read_text()).get("files")
        mine = None
        if isinstance(files, dict):  # checkpoints written before checksums, or with them off, have none
            mine = checksums.content_problem(path, files, self.world.rank, self.world.world_size)
        return next((r for r in all_gather_objects(mine) if r is not None), None)


class NoUsableCheckpoint(ConfigError):
    """Every checkpoint a run could resume from is damaged: starting over must be the user's decision, since it
    replaces the run's metrics."""

    def __init__(self, damaged: list[tuple[Path, str]]):
        self.damaged = damaged
        listing = "; ".join(f"{p} ({reason})" for p, reason in damaged)
        super().__init__(
            f"no checkpoint to resume from is usable: {listing}. Fix: trainer.resume=false starts this "
            f"run dir over (its metrics.jsonl and checkpoints are moved aside), or trainer.resume_from=<another "
            f"run dir or checkpoint>"
        )


class CheckpointMisfit(ConfigError):
    """A whole checkpoint that does not fit this run's model and optimizer: the config differs from the run that
    wrote it (a checkpoint without a run identity, or a change the identity does not cover). Nothing is set aside."""

    def __init__(self, path: Path, reason: str):
        super().__init__(
            f"checkpoint {path} does not fit this run's model and optimizer ({reason}): it was written with another "
            f"config, and is left as it is. Fix: resume with the config of the run that wrote it (see its "
            f"meta.json), or trainer.resume=false to start this run dir over (its checkpoints are moved aside)"
        )
