"""A checkpoint's weights alone, for scoring them (``rewardflow-eval``; launcher/evaluate_cli.py).

A resume restores everything (:meth:`launcher.checkpoint.manager.CheckpointManager.load`: weights, optimizer, RNG
states, with the same number of ranks). Scoring needs the trained weights and, for ``eval.use_ema``, their EMA: this
reads only those from the DCP checkpoint, read as plain data (:mod:`launcher.checkpoint.safe_dcp`). DCP reshards on
load, so any number of ranks can score a checkpoint of any other.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.api import CheckpointException  # a BaseException
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, set_model_state_dict

from launcher.checkpoint.manager import load_state
from rewardflow.errors import ConfigError


def checkpoint_meta(path: Path) -> dict[str, Any]:
    """The checkpoint's ``meta.json`` (its step, wall clock, the states it holds)."""
    return json.loads((Path(path) / "meta.json").read_text())


def load_weights(path: Path, model: torch.nn.Module, ema=None, key: str = "evaluate.weights") -> dict[str, Any]:
    """Load the trained weights of checkpoint ``path`` into ``model`` (the trainable ones: what a checkpoint holds)
    and, when ``ema`` (a :class:`launcher.train.ema.ParameterEMA`) is given, the EMA of them into it; return the
    checkpoint's meta. Collective under FSDP."""
    meta = checkpoint_meta(path)
    if ema is not None and "ema" not in meta.get("states", []):
        raise ConfigError(
            f"{key}={path}: this checkpoint holds no EMA of the weights (its run had trainer.ema_decay=0). Fix: "
            f"eval.use_ema=false to score its weights"
        )
    options = StateDictOptions(ignore_frozen_params=True)
    state: dict[str, Any] = {"model": get_model_state_dict(model, options=options)}
    if ema is not None:
        state["ema"] = ema
    try:
        load_state(state, path)
    except (Exception, CheckpointException) as e:  # noqa: BLE001 - DCP: a misfit, with every rank's traceback
        first = next((line.strip() for line in str(e).splitlines() if "Missing key" in line or "mismatch" in line), "")
        raise ConfigError(
            f"{key}={path}: its weights do not fit model= as configured ({first or type(e).__name__}). Fix: the "
            f"model and model.finetune the checkpoint's run trained (its .hydra/config.yaml)"
        ) from e
    set_model_state_dict(model, state["model"], options=StateDictOptions(ignore_frozen_params=True, strict=False))
    return meta
