"""The ``auto`` settings the plan decides: ``model.activation_checkpointing=auto`` and ``model.text_encoders=auto``
become the cheapest setting whose plan fits (docs/memory.md#automatic-settings).

One function, :func:`resolve_auto`, decides for both ``rewardflow ... --plan`` (against ``cluster.gpu_mem_gb``) and a
run (against the GPU it got; the trainer builds the model from the resolved config), so the two agree whenever
``cluster.gpu_mem_gb`` is that GPU's memory. Cheapest means the least extra work per step:

* activation checkpointing: ``none`` (no recompute), then ``every_k`` (1/k of the blocks run their forward twice),
  then ``full`` (every block: about +33 % update FLOPs for full fine-tuning, +46 % for LoRA,
  docs/performance.md#activation-checkpointing);
* text encoders: ``device`` (never moved), then ``offload`` (moved to the GPU whenever a batch holds prompts not yet
  cached: 9.5 GB of T5 for FLUX.1). ``precompute`` is never chosen: it encodes the whole prompt set at start and
  refuses prompts met later (docs/memory.md#text-conditioning), a change of what the run can do, not of its cost.

A cheaper setting must leave :data:`HEADROOM` of the GPU free; the most frugal one only has to fit. Recompute costs more than moving the encoders (seconds of transformer FLOPs per update against under a second of
host-to-device copy), so every text-encoder placement is tried with less recompute before more recompute. When no
candidate fits, the most frugal one (``full``, ``offload``) is taken and the plan's fixes say what else to change.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from launcher.plan.memory_plan import GiB, MemoryPlan, plan

CHECKPOINTING = ("none", "every_k", "full")  # least recompute first
TEXT_ENCODERS = ("device", "offload")  # fewest host-to-device copies first
#: a setting other than the most frugal is chosen only if its peak leaves this share of the GPU free: activations are
#: the plan's least certain line (calibrated on the CPU, scaled to bf16; docs/memory.md#measured), and an
#: out-of-memory error mid-run costs more than the recompute saved
HEADROOM = 0.10


@dataclass
class Resolved:
    """A config whose ``auto`` keys are replaced by the chosen values, the choices and why."""

    cfg: dict
    choices: dict[str, str] = field(default_factory=dict)  # dotted key -> chosen value
    notes: list[str] = field(default_factory=list)


def _candidates(model: dict) -> list[tuple[str | None, str | None]]:
    """(checkpointing, text encoders) in order of cost; None where the key is set by hand."""
    none: tuple[str | None, ...] = (None,)
    checkpointing = CHECKPOINTING if str(model.get("activation_checkpointing")) == "auto" else none
    encoders = TEXT_ENCODERS if str(model.get("text_encoders")) == "auto" else none
    return [(a, t) for a in checkpointing for t in encoders]


def _with(cfg: dict, checkpointing: str | None, encoders: str | None) -> dict:
    out = copy.deepcopy(cfg)
    if checkpointing is not None:
        out["model"]["activation_checkpointing"] = checkpointing
    if encoders is not None:
        out["model"]["text_encoders"] = encoders
    return out


def resolve_auto(cfg: dict, world: int | None = None, gpu_gb: float | None = None) -> Resolved:
    """``cfg`` (a resolved plain dict) with ``model.activation_checkpointing`` and ``model.text_encoders`` decided
    where they are ``auto``; unchanged (no choices) when neither is, or for a model the planner does not know (the
    model's own fallback then applies: ``full``, ``offload``)."""
    model = cfg.get("model") or {}
    candidates = _candidates(model)
    if candidates == [(None, None)]:
        return Resolved(cfg)
    tried: list[tuple[tuple[str | None, str | None], MemoryPlan]] = []
    for checkpointing, encoders in candidates:
        trial = plan(_with(cfg, checkpointing, encoders), world, gpu_gb)
        if trial is None:
            return Resolved(cfg)  # not a planned family (the SOC toy)
        tried.append(((checkpointing, encoders), trial))
        last = (checkpointing, encoders) == candidates[-1]
        if trial.fits and (last or trial.peak <= (1 - HEADROOM) * trial.gpu_bytes):
            break
    (checkpointing, encoders), chosen = tried[-1]
    result = Resolved(_with(cfg, checkpointing, encoders))
    decided = {"model.activation_checkpointing": checkpointing, "model.text_encoders": encoders}
    result.choices = {key: value for key, value in decided.items() if value is not None}
    picked = " ".join(f"{k}={v}" for k, v in result.choices.items())
    others = ", ".join(" ".join(v for v in c if v is not None) + f" {p.peak / GiB:.1f} GiB" for c, p in tried[:-1])
    limit = f"{chosen.gpu_bytes / GiB:.0f} GiB"
    why = f"the cheapest within {limit} less {HEADROOM:.0%}" if chosen.fits else f"none within {limit}: the most frugal"
    result.notes.append(
        f"auto: {picked} ({why}, peak {chosen.peak / GiB:.1f} GiB"
        + (f"; cheaper but over it: {others}" if others else "")
        + ")"
    )
    return result
