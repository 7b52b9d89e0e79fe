"""Preemption-safe checkpoints with torch DCP, written by every rank.

Layout under ``<run_dir>/checkpoints/``::

    step_00000050/            a complete checkpoint (visible only once whole)
        .metadata, __*_0.distcp   DCP shards: trainable weights (full model or LoRA adapter) + optimizer
                                  (+ the method's extra state, e.g. DiffusionNFT's lagging sampling policy)
        rank_00000.pt ...     per-rank state: RNG states (torch, CUDA, numpy, python)
        meta.json             step, data position, W&B run id, cumulative wall-clock, world size
        COMPLETE              written last, before the rename
    .step_00000100.tmp/       a checkpoint being written (never picked up by resume)

A checkpoint is written into a temporary folder; rank 0 writes ``COMPLETE`` after every rank has finished and
then renames the folder into place, so a crash at any point leaves either the old set of checkpoints or the new
one, never a half-written checkpoint that resume would pick (``latest`` only accepts folders holding ``COMPLETE``).
"""
from __future__ import annotations

import json
import logging
import os
import random
import re
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict

from launcher.async_checkpoint import AsyncSaver
from launcher.distributed import World, barrier

log = logging.getLogger(__name__)

_STEP = re.compile(r"^step_(\d{8})$")
MARKER = "COMPLETE"


def rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


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

    def __init__(self, root: str | Path, world: World, keep_last: int = 2, asynchronous: bool = False):
        self.root = Path(root)
        self.world = world
        self.keep_last = max(1, keep_last)
        self.saver = AsyncSaver() if asynchronous else None     # launcher/async_checkpoint.py

    # -- finding ------------------------------------------------------------------------------------------------
    def complete(self) -> list[Path]:
        if not self.root.is_dir():
            return []
        found = [p for p in self.root.iterdir() if _STEP.match(p.name) and (p / MARKER).is_file()]
        return sorted(found, key=lambda p: int(_STEP.match(p.name).group(1)))

    def latest(self) -> Path | None:
        done = self.complete()
        return done[-1] if done else None

    # -- saving -------------------------------------------------------------------------------------------------
    def save(self, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
             meta: dict[str, Any], extra: dict[str, torch.Tensor] | None = None) -> Path:
        """Collective: every rank must call it with the same ``step``. ``extra``: more tensors (possibly
        DTensors) saved under ``method``. Asynchronous managers return once the state is staged in host memory; the
        checkpoint appears (is committed) when the background write has finished (:meth:`wait`)."""
        t0 = time.perf_counter()
        self.wait()                                       # the previous save is committed before this one starts
        final = self.root / f"step_{step:08d}"
        tmp = self.root / f".step_{step:08d}.tmp"
        if self.world.is_main:
            shutil.rmtree(tmp, ignore_errors=True)        # leftovers of a writer that died
            tmp.mkdir(parents=True)
        barrier()
        model_sd, optim_sd = get_state_dict(model, optimizer, options=StateDictOptions(ignore_frozen_params=True))
        state = {"model": model_sd, "optim": optim_sd, **({"method": extra} if extra else {})}
        torch.save(rng_state(), tmp / f"rank_{self.world.rank:05d}.pt")
        meta = {**meta, "step": step, "world_size": self.world.world_size}
        commit = (lambda: self._commit(tmp, final, meta)) if self.world.is_main else None
        if self.saver is not None:
            self.saver.start(state, str(tmp), commit)
            log.info("checkpoint %s staged in %.2f s, writing in the background", final, time.perf_counter() - t0)
            return final
        dcp.save(state, checkpoint_id=str(tmp))
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
            barrier()                                     # rank 0's commit is visible to all once they pass

    def _commit(self, tmp: Path, final: Path, meta: dict[str, Any]) -> None:
        """Rank 0, once every rank's shards are written: ``meta.json``, ``COMPLETE``, the rename, pruning."""
        _fsync_write(tmp / "meta.json", json.dumps(meta))
        _fsync_write(tmp / MARKER, f"{meta['step']}\n")
        if final.exists():                                # a re-save of the same step (replayed after resume)
            shutil.rmtree(final)
        os.replace(tmp, final)
        self._prune()

    def _prune(self) -> None:
        for old in self.complete()[:-self.keep_last]:
            shutil.rmtree(old, ignore_errors=True)

    # -- loading ------------------------------------------------------------------------------------------------
    def load(self, path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
             extra: dict[str, torch.Tensor] | None = None) -> dict[str, Any]:
        """Restore weights, optimizer, the ``extra`` tensors (in place) and this rank's RNG state; return the
        checkpoint's meta."""
        meta = json.loads((path / "meta.json").read_text())
        if meta["world_size"] != self.world.world_size:
            raise RuntimeError(f"checkpoint {path} was written by {meta['world_size']} ranks, this job has "
                               f"{self.world.world_size}; resume with the same cluster.tasks_per_node x nodes")
        opts = StateDictOptions(ignore_frozen_params=True)
        model_sd, optim_sd = get_state_dict(model, optimizer, options=opts)
        state = {"model": model_sd, "optim": optim_sd, **({"method": extra} if extra else {})}
        dcp.load(state, checkpoint_id=str(path))
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"],
                       options=StateDictOptions(ignore_frozen_params=True, strict=False))
        rank_file = path / f"rank_{self.world.rank:05d}.pt"
        set_rng_state(torch.load(rank_file, weights_only=False))
        log.info("resumed from %s (step %d)", path, meta["step"])
        return meta
