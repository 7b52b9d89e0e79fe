"""The plan every run computes before any weight is read (docs/memory.md#the-check-at-start): the ``auto`` settings
decided from it (``choices.py``), the model config the trainer builds from, and on a GPU the check that the planned
peak fits this GPU, as ``trainer.memory_check`` says: ``error`` stops with the fixes, ``warn`` logs them and starts,
``off`` neither checks nor logs the fit."""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from typing import Any

from launcher.plan.fixes import plan_with_fixes
from launcher.plan.memory_plan import GiB, MemoryPlan
from rewardflow.errors import ConfigError

log = logging.getLogger(__name__)


@dataclass
class StartPlan:
    model: Any  # the model config to build: ``cfg.model`` with the ``auto`` keys decided
    plan: MemoryPlan | None  # None: not a planned family, or a CPU run without ``auto`` keys
    on_gpu: bool  # planned against this process's GPU


def _has_auto(model: Any) -> bool:
    return any(str(model.get(k)) == "auto" for k in ("activation_checkpointing", "text_encoders"))


def check_at_start(cfg, world, gpu_gb: float | None = None) -> StartPlan:
    """``cfg``: the run's DictConfig; ``world``: rewardflow.distributed.World. On CUDA the plan is made against the
    GPU's memory (``gpu_gb`` overrides it, for tests), elsewhere against ``cluster.gpu_mem_gb`` as ``--plan`` does;
    a CPU run is never refused (its memory is the host's, which the plan does not model)."""
    import torch
    from omegaconf import OmegaConf

    on_gpu = cfg.model.get("device", "auto") != "cpu" and (gpu_gb is not None or torch.cuda.is_available())
    if not on_gpu and not _has_auto(cfg.model):
        return StartPlan(cfg.model, None, False)
    if on_gpu and gpu_gb is None:
        gpu_gb = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory / GiB
    container = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(container, dict)  # the run's config is a DictConfig
    result = plan_with_fixes(container, world.world_size, gpu_gb)
    if result is None:
        return StartPlan(cfg.model, None, False)
    model = cfg.model
    if result.choices:
        decided = copy.deepcopy(cfg)  # the whole config: the model's interpolations still resolve
        for key, value in result.choices.items():
            OmegaConf.update(decided, key, value)
        model = decided.model
        if world.is_main:
            log.info("memory plan: %s", "; ".join(result.notes[:1]))
    if on_gpu:
        _check_fit(result, str(cfg.trainer.get("memory_check", "error")), world.is_main)
    return StartPlan(model, result, on_gpu)


def _check_fit(result: MemoryPlan, mode: str, is_main: bool) -> None:
    if mode == "off":
        return
    if is_main:
        log.info("%s", result.table())
    if result.fits:
        return
    message = (
        f"the planned memory does not fit: {result.verdict()}. Fix: "
        + "; ".join(result.fixes or ["more ranks or a smaller configuration"])
        + " (`rewardflow ... --plan` prints the table)"
    )
    if mode == "warn":
        if is_main:
            log.warning("%s; starting anyway (trainer.memory_check=warn)", message)
        return
    raise ConfigError(message + "; trainer.memory_check=warn starts it anyway")
