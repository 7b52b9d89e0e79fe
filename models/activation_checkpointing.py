"""Activation checkpointing as a choice (docs/performance.md#activation-checkpointing).

``model.activation_checkpointing`` (:class:`models.common_config.ActivationCheckpointing`):

* ``none``: every block keeps its activations for the backward (fastest, most memory);
* ``full``: every block is checkpointed: only its inputs are kept and its forward runs again in the backward (about
  +33% update FLOPs for full fine-tuning, +46% for LoRA, whose backward computes no weight gradients of the base);
* ``every_k``: one block of every ``model.activation_checkpointing_k`` consecutive blocks is checkpointed (blocks
  k-1, 2k-1, ... in forward order), torchtitan's selective per-layer checkpointing (``selective_ac_option=k``):
  about 1/k of ``full``'s memory saving for 1/k of its recompute;
* ``auto``: the cheapest of ``none``, ``every_k``, ``full`` whose memory plan fits, decided before the model is built
  (``launcher/plan/choices.py``; the trainer builds the model with the decided value, docs/memory.md#automatic-settings);
  a model built without a plan (tests, scripts) takes ``full``, the setting that fits most.

The blocks are checkpointed through diffusers' own hook: every family's transformer calls
``self._gradient_checkpointing_func(block, *inputs)`` for each block when gradient checkpointing is enabled and
gradients are on, and :func:`apply_activation_checkpointing` installs a function that checkpoints only the chosen
blocks (``torch.utils.checkpoint``, non-reentrant) and calls the others directly. Modules, parameter names and
state dicts stay as they are (LoRA, FSDP2 sharding, DCP checkpoints and exports are unaffected).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import nn

from models.common_config import ActivationCheckpointing
from rewardflow.errors import ConfigErrors


def check_activation_checkpointing(model_cfg: Any, errors: ConfigErrors) -> None:
    """The checks of ``model.activation_checkpointing`` (its mode is an enum, checked when the config is composed)."""
    if model_cfg.activation_checkpointing == ActivationCheckpointing.every_k:
        k = model_cfg.activation_checkpointing_k
        errors.require(
            k >= 1,
            "model.activation_checkpointing_k",
            f"must be >= 1 with model.activation_checkpointing=every_k (got {k}). Fix: "
            f"model.activation_checkpointing_k=2 (every second block; 1 is full)",
        )


def resolve_activation_checkpointing(mode: str) -> ActivationCheckpointing:
    """The setting to apply for ``model.activation_checkpointing=mode``: ``auto`` reaches a model only when no plan
    decided it (a model built outside the trainer), and is then ``full``."""
    mode = ActivationCheckpointing(mode)
    return ActivationCheckpointing.full if mode == ActivationCheckpointing.auto else mode


def checkpointed_blocks(n_blocks: int, mode: str, k: int = 2) -> list[int]:
    """Indices (in forward order) of the blocks a resolved ``mode`` checkpoints."""
    if mode == ActivationCheckpointing.none:
        return []
    if mode == ActivationCheckpointing.full:
        return list(range(n_blocks))
    if mode == ActivationCheckpointing.every_k:
        return [i for i in range(n_blocks) if (i + 1) % int(k) == 0]
    raise ValueError(f"unresolved activation checkpointing mode {mode!r}")


def apply_activation_checkpointing(
    transformer: nn.Module, blocks: Sequence[nn.Module], mode: str, k: int = 2
) -> list[int]:
    """Checkpoint the ``blocks`` of ``transformer`` that ``mode`` (resolved) selects; returns their indices."""
    chosen = checkpointed_blocks(len(blocks), mode, k)
    if not chosen:
        transformer.disable_gradient_checkpointing()
        return chosen
    selected = {id(blocks[i]) for i in chosen}

    def checkpoint_selected(block: nn.Module, *args, **kwargs):
        if id(block) in selected:
            return torch.utils.checkpoint.checkpoint(block.__call__, *args, use_reentrant=False, **kwargs)
        return block(*args, **kwargs)

    transformer.enable_gradient_checkpointing(gradient_checkpointing_func=checkpoint_selected)
    return chosen
