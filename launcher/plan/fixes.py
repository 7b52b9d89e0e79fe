"""When a run does not fit: the single config changes that make it fit, else the changes together, and the rank
count at which it fits unchanged (docs/memory.md#the-plan-before-submission); the check at start is
``start_check.py``."""

from __future__ import annotations

import copy
import math

from launcher.plan.choices import resolve_auto
from launcher.plan.memory_plan import GiB, MemoryPlan, plan, world_size

#: single changes tried in order when a run does not fit (key, value, when it applies)
CANDIDATES = (
    (
        "model.activation_checkpointing",
        "full",
        lambda c: str(c["model"].get("activation_checkpointing", "auto")) not in ("full", "auto"),
    ),
    ("method.update_batch", 2, lambda c: int(c["method"].get("update_batch", 8)) > 2),
    ("method.rollout_chunk", None, lambda c: True),
    ("method.decode_chunk", 1, lambda c: int(c["method"].get("decode_chunk", 8)) > 1),
    ("method.trajectory_offload", True, lambda c: not c["method"].get("trajectory_offload")),
    ("model.text_encoders", "precompute", lambda c: c["model"].get("text_encoders", "offload") != "precompute"),
    ("model.reference_dtype", "bfloat16", lambda c: c["model"].get("reference_dtype") == "float32"),
    ("model.base_sharding", "shard", lambda c: c["model"].get("base_sharding") == "replicate"),
    ("model.finetune", "lora", lambda c: c["model"].get("finetune") == "full"),
)


def with_override(cfg: dict, key: str, value) -> dict:
    out = copy.deepcopy(cfg)
    group, name = key.split(".", 1)
    out[group][name] = value
    return out


def suggest_fixes(cfg: dict, result: MemoryPlan, world: int, gpu_gb: float | None) -> list[str]:
    """Single changes that make the run fit, then the rank count it needs unchanged."""
    fixes, current = [], cfg
    for key, value, applies in CANDIDATES:
        if not applies(current):
            continue
        if key == "method.rollout_chunk":
            value = 2 if float(cfg["model"].get("guidance_scale", 1.0)) > 1 else 1
            if int(current["method"].get("rollout_chunk", 32)) <= value:
                continue
        trial = plan(with_override(current, key, value), world, gpu_gb)
        if trial is not None and trial.fits:
            fixes.append(f"{key}={_fmt(value)} (peak {trial.peak / GiB:.1f} GiB)")
    combined, applied = cfg, []
    if not fixes:  # no single change: the changes together (the method kept)
        for key, value, applies in CANDIDATES:
            if key in ("method.rollout_chunk", "model.finetune") or not applies(combined):
                continue
            combined = with_override(combined, key, value)
            applied.append(f"{key}={_fmt(value)}")
            trial = plan(combined, world, gpu_gb)
            if trial is not None and trial.fits:
                fixes.append(" ".join(applied) + f" (peak {trial.peak / GiB:.1f} GiB)")
                break
    needed = ranks_needed(cfg, world, gpu_gb)
    if needed:
        fixes.append(f"or {_ranks(needed)} unchanged")
    elif not fixes and applied and (needed := ranks_needed(combined, world, gpu_gb)):
        fixes.append(" ".join(applied) + f" on {_ranks(needed)}")
    return fixes


def _ranks(n: int) -> str:
    return (
        f"{n} ranks (e.g. cluster.nodes={math.ceil(n / 8)} cluster.gpus_per_node={min(n, 8)}) with "
        f"method.prompts_per_step a multiple of {n}"
    )


def ranks_needed(cfg: dict, world: int, gpu_gb: float | None, limit: int = 1024) -> int | None:
    """The fewest ranks (a multiple of 8 beyond 8) at which this run fits unchanged, or None."""
    n = world
    while n < limit:
        n = n * 2 if n < 8 else n + 8
        trial = plan(cfg, n, gpu_gb)
        if trial is not None and trial.fits:
            return n
    return None


def _fmt(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def plan_with_fixes(cfg: dict, world: int | None = None, gpu_gb: float | None = None) -> MemoryPlan | None:
    """The plan of ``cfg`` with its ``auto`` settings decided (``launcher/plan/choices.py``, said in a note and kept in
    ``choices``) and, if it does not fit, the fixes."""
    world = world or world_size(cfg)
    resolved = resolve_auto(cfg, world, gpu_gb)
    result = plan(resolved.cfg, world, gpu_gb)
    if result is None:
        return None
    result.choices, result.notes = resolved.choices, [*resolved.notes, *result.notes]
    if not result.fits:
        result.fixes = suggest_fixes(resolved.cfg, result, world, gpu_gb)
    return result
