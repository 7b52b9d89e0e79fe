"""Config of ``rewardflow-eval`` (``evaluate.*``; launcher/evaluate_cli.py, docs/evaluation.md#evaluating-without-training).

``evaluate.weights`` names what is scored, read here without torch so that a wrong path is reported in about a
second, before any model is built:

- ``base``: the model as ``model=...`` builds it (the weights every run starts from);
- an export folder (``<run dir>/export``, what ``trainer.export`` writes: it holds ``rewardflow_export.json``);
- a checkpoint folder (``<run dir>/checkpoints/step_<N>``, complete: it holds ``COMPLETE``);
- a run dir (or its ``checkpoints/`` folder): every complete checkpoint of the run, oldest first.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rewardflow.errors import ConfigErrors
from rewardflow.prompts import held_out_count

KEY = "evaluate.weights"
BASE = "base"
#: the file every export holds (models/export.py), and the file a complete checkpoint holds (launcher/checkpoint)
EXPORT_FILE = "rewardflow_export.json"
CHECKPOINT_MARKER = "COMPLETE"


@dataclass
class EvaluateConfig:
    """What ``rewardflow-eval`` scores; how it scores (prompts, noise, sampler, rewards) is ``eval.*``, as in training."""

    weights: str = BASE  # base | <export folder> | <checkpoint folder> | <run dir> (every checkpoint of the run)

    @classmethod
    def check(cls, cfg: Any, errors: ConfigErrors) -> None:
        """The rules on ``evaluate.*`` and on the ``eval.*`` keys an evaluation without training needs (run by
        :func:`launcher.validate.check_config` before torch is imported)."""
        sources = None
        with errors.collect():
            sources = weights_sources(str(cfg.evaluate.weights))
        e = cfg.eval
        errors.require(
            e.prompts is not None or held_out_count(e) > 0 or cfg.data.set is not None,
            "eval.prompts",
            "rewardflow-eval scores held-out prompts, and none are set. Fix: eval.prompts=/path/prompts.txt (or a "
            "list, or a named set: eval.prompts=drawbench), or eval.split=N to score the N prompts a run of this data holds "
            "out",
        )
        if sources and e.use_ema:
            errors.require(
                all(kind == "checkpoint" for kind, _ in sources),
                "eval.use_ema",
                f"true scores a checkpoint's EMA weights, and {KEY}={cfg.evaluate.weights} holds one set of weights. "
                f"Fix: eval.use_ema=false, or {KEY}=<a checkpoint or run dir>",
            )


def weights_sources(value: str) -> list[tuple[str, Path | None]]:
    """``[(kind, path)]`` that ``evaluate.weights=value`` names: ``("base", None)``, ``("export", folder)`` or
    ``("checkpoint", folder)`` for each checkpoint, oldest first. Raises :class:`ConfigError` naming the key."""
    from rewardflow.errors import ConfigError

    if value == BASE:
        return [(BASE, None)]
    path = Path(value).expanduser()
    forms = (
        f"{KEY}=base, {KEY}=<run dir>/export (an export), {KEY}=<run dir>/checkpoints/step_<N> (a checkpoint) or "
        f"{KEY}=<run dir> (each of its checkpoints)"
    )
    if not path.is_dir():
        raise ConfigError(f"{KEY}={value}: {'no such folder' if not path.exists() else 'not a folder'}. Fix: {forms}")
    if (path / EXPORT_FILE).is_file():
        return [("export", path)]
    if (path / CHECKPOINT_MARKER).is_file():
        return [("checkpoint", path)]
    if path.name.startswith("step_"):
        raise ConfigError(
            f"{KEY}={value}: this checkpoint is incomplete (no {CHECKPOINT_MARKER} file: its writer stopped before "
            f"the end). Fix: {KEY}=<its run dir> to score its complete checkpoints"
        )
    root = path if path.name == "checkpoints" else path / "checkpoints"
    found = sorted(
        (p for p in root.glob("step_*") if p.name[5:].isdigit() and (p / CHECKPOINT_MARKER).is_file()),
        key=lambda p: int(p.name[5:]),
    )  # a checkpoint set aside (step_<N>.damaged-<time>) is not one of the run's
    if not found:
        what = "holds no complete checkpoint" if root.is_dir() else "is neither an export, a checkpoint nor a run dir"
        raise ConfigError(f"{KEY}={value}: {what}. Fix: {forms}")
    return [("checkpoint", p) for p in found]
