"""The identity of a run: the resolved config keys that define what it trains (docs/resume.md#run-identity).

Every checkpoint's ``meta.json`` and every run dir's ``run_identity.json`` record it, with the command-line overrides
that produced it. A resume compares it with the new config before any model is built or any checkpoint is read:

- in the run's own dir (a restart, a requeued job, a sweep re-run with ``hydra.sweep.dir``) every identity key must
  be equal; only the keys in :data:`MAY_CHANGE_ON_RESUME` may differ (a longer ``trainer.steps``, another cluster,
  a smaller ``method.update_batch`` after an out-of-memory error);
- from another run (``trainer.resume_from``) only the keys that give the checkpoint's tensors their meaning must be
  equal (:data:`RESUME_FROM_MUST_MATCH`: the method and the model); the rest may differ by design (another learning
  rate, reward or prompt set).

A mismatch is a :class:`ConfigError` naming the differing keys, both values and the fix, and nothing in the run dir
is touched: without it a sweep re-run with its overrides in another order resumed each point from another point's
checkpoint and W&B run (jobs are numbered by position), and a restart with another ``model.finetune`` set aside the
run's good checkpoints as damaged.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rewardflow.errors import ConfigError
from rewardflow.prompts import held_out_count

log = logging.getLogger(__name__)

FILE = "run_identity.json"  # in the run dir, written when the run starts

#: keys (a key or a whole group, by prefix) that change where, how fast or how long a run goes, or what it reports,
#: never what it computes: they may differ when a run resumes in its own dir. Documented in docs/resume.md.
MAY_CHANGE_ON_RESUME: tuple[str, ...] = (
    "trainer.steps",  # extend or shorten a run
    "trainer.resume",
    "trainer.resume_from",
    "trainer.ckpt_every",
    "trainer.async_checkpoint",
    "trainer.keep_last_ckpts",
    "trainer.checkpoint_checksums",
    "trainer.sample_every",
    "trainer.num_sample_images",
    "trainer.log_every",
    "trainer.progress",
    "trainer.threads",
    "trainer.export",
    "trainer.export_ema",
    "trainer.max_nonfinite_in_a_row",
    "trainer.max_weight_growth",
    "trainer.memory_check",  # whether a plan that does not fit stops the run, not what it computes
    "trainer.objective",  # what the run returns to a sweeper
    "trainer.objective_direction",
    "cluster",  # where the ranks run (the number of ranks is checked against each checkpoint)
    "logger",  # the W&B project, tags and mode
    "eval",  # held-out evaluation reads the weights, never changes them
    "task_name",
    "output_root",
    "model.device",
    "model.fps",  # the frame rate of the videos a run writes (what it reports)
    "model.cache_dir",  # where built tiny twins are cached
    "model.allow_cpu",
    "model.compile",
    "model.activation_checkpointing",
    "model.activation_checkpointing_k",
    "model.prompt_cache_size",
    "model.prompt_cache_gib",
    "model.text_encoders",
    "model.base_sharding",
    "method.update_batch",  # rows per transformer call: the memory bound, not the batch (docs/performance.md)
    "method.rollout_chunk",
    "method.decode_chunk",
    "method.trajectory_offload",
)

#: ``trainer.resume_from``: the keys (by prefix) that must be equal to the other run's, as the checkpoint's weights,
#: optimizer state and method state mean something only for that method on that model
RESUME_FROM_MUST_MATCH: tuple[str, ...] = ("method.name", "method._target_", "model")

#: groups whose option change is reported as one line (``method: dance_grpo -> flow_grpo_fast``), not key by key
GROUPS = ("method", "model", "reward", "data")
SHOWN = 8  # differing keys listed before "and N more"


def _under(key: str, prefixes: tuple[str, ...]) -> bool:
    return any(key == p or key.startswith(p + ".") for p in prefixes)


def _flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for k, v in node.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: node}


#: not a config key: how many of the data's prompts the run holds out of training (``eval.split``, or data=file's
#: ``eval.default_split`` while evaluating; rewardflow/prompts.py ``held_out_count``), the one part of the
#: ``eval`` group that changes what a run computes: its training prompts
HELD_OUT = "prompts held out of training (eval.split, or eval.default_split while evaluating)"


def identity(cfg: DictConfig) -> dict[str, Any]:
    """The run-defining keys of ``cfg`` (resolved, dotted) and their values: every key but
    :data:`MAY_CHANGE_ON_RESUME` and Hydra's own, plus :data:`HELD_OUT`."""
    data = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    assert isinstance(data, dict)
    data.pop("hydra", None)
    flat = _flatten(json.loads(json.dumps(data, default=str)))  # JSON values, as meta.json stores them
    out = {k: v for k, v in sorted(flat.items()) if not _under(k, MAY_CHANGE_ON_RESUME)}
    if cfg.get("eval") is not None:
        out[HELD_OUT] = held_out_count(cfg.eval)
    return out


def record(cfg: DictConfig, overrides: list[str] | None) -> dict[str, Any]:
    """What a checkpoint's meta and the run dir's :data:`FILE` store: the identity and the overrides."""
    return {"identity": identity(cfg), "overrides": list(overrides or [])}


def write(run_dir: Path, cfg: DictConfig, overrides: list[str] | None) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / FILE).write_text(json.dumps(record(cfg, overrides), indent=1) + "\n")


def differences(saved: dict[str, Any], current: dict[str, Any], keys: tuple[str, ...] | None = None) -> list[str]:
    """One line per differing key present in both (a key one side lacks is a config key added or removed by an
    upgrade of rewardflow, at its default, so it is not a difference); a group whose option changed is one line.
    ``keys``: only keys under these prefixes."""
    common = [k for k in current if k in saved and (keys is None or _under(k, keys))]
    changed = [k for k in common if saved[k] != current[k]]
    lines, covered = [], []
    for group in GROUPS:
        name = f"{group}.name"
        if name in changed:
            lines.append(f"{group}: {saved[name]} (checkpoint) vs {current[name]} (this run)")
            covered.append(group)
    rest = [k for k in changed if not _under(k, tuple(covered))]
    lines += [f"{k}: {saved[k]!r} (checkpoint) vs {current[k]!r} (this run)" for k in rest[:SHOWN]]
    if len(rest) > SHOWN:
        lines.append(f"and {len(rest) - SHOWN} more keys")
    return lines


def saved_record(run_dir: Path) -> tuple[dict[str, Any] | None, Path | None]:
    """The identity record of the run in ``run_dir``: its newest complete checkpoint's, else its :data:`FILE`'s
    (a run that stopped before its first checkpoint still owns its metrics and W&B run); (None, None) if it has
    neither or they predate run identities. Unreadable files are the damaged-checkpoint handling's business."""
    from launcher.checkpoint.manager import MARKER

    root = run_dir / "checkpoints"
    found = sorted(p for p in root.glob("step_*") if (p / MARKER).is_file()) if root.is_dir() else []
    for path in [*(c / "meta.json" for c in reversed(found)), run_dir / FILE]:
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and isinstance(record.get("identity"), dict):
            return record, path
        if path.name == "meta.json":  # a checkpoint written before run identities: nothing to compare
            return None, None
    return None, None


def check_own_run(cfg: DictConfig, run_dir: Path) -> None:
    """Raise :class:`ConfigError` if ``run_dir`` holds another run's progress than ``cfg`` (``trainer.resume=true``)."""
    if not cfg.trainer.resume:
        return
    record, where = saved_record(run_dir)
    if record is None:
        return
    lines = differences(record["identity"], identity(cfg))
    if lines:
        was = " ".join(record.get("overrides") or []) or "(no overrides)"
        raise ConfigError(
            f"the run dir {run_dir} holds another run ({where}): it was started with `{was}` and differs in\n  "
            + "\n  ".join(lines)
            + "\nNothing was changed there. Fix: run in a new run dir (another hydra.run.dir / hydra.sweep.dir, or "
            "the same sweep overrides in the same order), set the keys back to continue that run, or "
            "trainer.resume=false to start the dir over (its checkpoints are kept aside). Keys that may change on "
            "resume: docs/resume.md#run-identity"
        )


def check_resume_from(cfg: DictConfig, checkpoint: Path) -> None:
    """Raise :class:`ConfigError` if ``checkpoint`` (another run's) was written by another method or model."""
    try:
        meta = json.loads((checkpoint / "meta.json").read_text())
    except (OSError, ValueError):
        return  # the damaged-checkpoint handling reports it
    saved = meta.get("identity")
    if not isinstance(saved, dict):
        log.warning("%s predates run identities: its method and model cannot be checked", checkpoint)
        return
    current = identity(cfg)
    lines = differences(saved, current, RESUME_FROM_MUST_MATCH)
    if lines:
        raise ConfigError(
            f"trainer.resume_from={cfg.trainer.resume_from}: {checkpoint} was written by another method or model:\n  "
            + "\n  ".join(lines)
            + "\nIts weights and optimizer state mean nothing to this run. Fix: set these keys as that run had them "
            "(its overrides: " + (" ".join(meta.get("overrides") or []) or "none") + "), or start without "
            "trainer.resume_from"
        )
    warmup = "trainer.ema_warmup"
    if "ema" in meta.get("states", []) and current.get("trainer.ema_decay") and saved.get(warmup) is not None:
        if bool(saved[warmup]) != bool(current.get(warmup)):  # the EMA's saved layout differs (launcher/train/ema.py)
            raise ConfigError(
                f"trainer.resume_from={cfg.trainer.resume_from}: {checkpoint} holds an EMA of the weights saved with "
                f"{warmup}={str(bool(saved[warmup])).lower()}, and this run has "
                f"{warmup}={str(bool(current.get(warmup))).lower()}: the warmup's update count is saved only with "
                f"the warmup, so one run cannot continue the other's average. Fix: {warmup}="
                f"{str(bool(saved[warmup])).lower()} to continue it, or trainer.ema_decay=0 {warmup}=false to resume without it"
            )
