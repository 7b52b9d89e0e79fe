"""The GPU check's handle on rewardflow's own trainer (launcher/train/trainer.py): compose a run as the CLI would,
build it, and run single steps counted three ways, each on its own step so that one count does not disturb another:

* :func:`counted_step`: the step under ``torch.utils.flop_counter.FlopCounterMode``: FLOPs executed in total, in the
  transformer's calls (forward, backward and activation-checkpointing recompute: the module hierarchy the counter
  tracks) and per phase (rollout, reward, update);
* :func:`synced_step`: the step under the host-sync counter (launcher/train/host_syncs.py), which on CUDA counts the
  read-backs and host<->device copies that stall the queue (docs/performance.md#one-host-sync-per-update);
* a plain step: the trainer's own synchronised phase seconds (CUDA events, launcher/tracking/phase_timer.py) and
  measured peak memory per phase (launcher/tracking/phase_memory.py).

:func:`save_checkpoint` writes a DCP checkpoint through the trainer's manager, :func:`reopen` builds the run again
from it, as a requeued job would (docs/resume.md).
"""

from __future__ import annotations

import gc
import time
from pathlib import Path
from typing import Any

import torch

PHASES = ("rollout", "reward", "update")


def compose_cfg(overrides: list[str]):
    from launcher.config import compose

    return compose(overrides)


def build_trainer(cfg, run_dir: Path):
    from launcher.train.trainer import RunInfo, Trainer

    return Trainer(cfg, RunInfo(run_dir=run_dir))


def close(trainer) -> None:
    """Let the run dir and the memory go (the next trainer in this process reopens the same run dir)."""
    trainer.checkpoints.wait()
    trainer.logger.finish(0)
    if trainer.run_lock is not None:
        trainer.run_lock.release()
    device = trainer.backbone.device
    trainer.counter.remove()
    del trainer
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _transformer_names(trainer) -> set[str]:
    """The FLOP counter's keys of the transformer modules: the class names of the outermost modules it tracks."""
    return {type(m).__name__ for m in trainer.backbone.transformer_modules()}


def counted_step(trainer, step: int) -> tuple[dict, dict[str, Any]]:
    """``train_step(step)`` with its FLOPs counted: ``{total, transformer, phases: {phase: {total, transformer}}}``
    (FLOPs, not TFLOP)."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    names = _transformer_names(trainer)

    def totals() -> tuple[int, int]:
        counts = counter.get_flop_counts()
        own = sum(sum(counts.get(n, {}).values()) for n in names)
        return int(counter.get_total_flops()), int(own)

    phases: dict[str, dict[str, int]] = {p: {"total": 0, "transformer": 0} for p in PHASES}
    targets = {
        "rollout": (trainer.method, "rollout"),
        "reward": (trainer.method, "score"),
        "update": (trainer.updates, "run"),
    }
    for phase, (owner, attr) in targets.items():
        inner = getattr(owner, attr)

        def wrapped(*args, _inner=inner, _phase=phase, **kwargs):
            t0, o0 = totals()
            try:
                return _inner(*args, **kwargs)
            finally:
                t1, o1 = totals()
                phases[_phase]["total"] += t1 - t0
                phases[_phase]["transformer"] += o1 - o0

        setattr(owner, attr, wrapped)
    try:
        with counter:
            metrics = trainer.train_step(step)
    finally:
        for owner, attr in targets.values():
            delattr(owner, attr)  # the instance attribute goes; the method is the class's again
    total, own = totals()
    return metrics, {"total": total, "transformer": own, "phases": phases}


def synced_step(trainer, step: int) -> tuple[dict, dict[str, Any]]:
    """``train_step(step)`` with its host syncs counted, split by phase and by kind (read-backs vs copies), and the
    sites that sync most (file:line)."""
    from launcher.train.host_syncs import HostSyncCounter

    per_phase: dict[str, int] = {}
    copies_per_phase: dict[str, int] = {}
    targets = {
        "rollout": (trainer.method, "rollout"),
        "reward": (trainer.method, "score"),
        "update": (trainer.updates, "run"),
    }
    with HostSyncCounter() as syncs:
        for phase, (owner, attr) in targets.items():
            inner = getattr(owner, attr)

            def wrapped(*args, _inner=inner, _phase=phase, **kwargs):
                n0, c0 = syncs.total, syncs.copies
                try:
                    return _inner(*args, **kwargs)
                finally:
                    per_phase[_phase] = per_phase.get(_phase, 0) + syncs.total - n0
                    copies_per_phase[_phase] = copies_per_phase.get(_phase, 0) + syncs.copies - c0

            setattr(owner, attr, wrapped)
        try:
            metrics = trainer.train_step(step)
        finally:
            for owner, attr in targets.values():
                delattr(owner, attr)
    updates = int(trainer.cfg.method.get("updates_per_rollout", 1) or 1)
    return metrics, {
        "total": syncs.total,
        "copies": syncs.copies,
        "per_phase": per_phase,
        "copies_per_phase": copies_per_phase,
        "per_update": per_phase.get("update", 0) / updates,
        "top_sites": dict(syncs.sites.most_common(5)),
    }


def digest(trainer) -> torch.Tensor:
    """``(sum, sum of squares)`` of every trainable parameter in float64, on the host: two runs' weights compared
    without holding a second copy of them."""
    with torch.no_grad():
        rows = [torch.stack([p.detach().double().sum(), p.detach().double().square().sum()]) for p in trainer.params]
    return torch.stack(rows).cpu()


def digest_rel_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest relative difference of two digests (0.0 when equal bit for bit)."""
    return float(((a - b).abs() / b.abs().clamp_min(1e-30)).max())


def save_checkpoint(trainer, step: int) -> dict[str, Any]:
    """Save a DCP checkpoint of ``step`` through the trainer's manager (launcher/checkpoint/manager.py) and wait
    until it is committed: its path, seconds and bytes on disk."""
    t0 = time.perf_counter()
    path = trainer.save_checkpoint(step)
    trainer.checkpoints.wait()
    save_s = time.perf_counter() - t0
    if path is None:
        raise RuntimeError(f"step {step} was not checkpointed (its update was skipped or its weights are broken)")
    size = sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())
    return {"checkpoint": str(path), "save_s": save_s, "bytes": size}


def reopen(cfg, run_dir: Path) -> tuple[Any, float]:
    """The run built again from its newest checkpoint (``trainer.resume=true``, the default)."""
    t0 = time.perf_counter()
    resumed = build_trainer(cfg, run_dir)
    return resumed, time.perf_counter() - t0
