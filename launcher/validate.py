"""Checks of the composed config that run before any model is built.

Types and unknown keys are already rejected by the schemas at composition time; this adds ranges and rules that
involve several groups. Every error names the key and the fix.
"""
from __future__ import annotations

from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf

from launcher.data import load_prompts
from launcher.errors import ConfigError


def _component(cfg: DictConfig, group: str):
    target = cfg[group].get("_target_")
    try:
        return get_class(target)
    except Exception as e:  # hydra wraps import errors
        raise ConfigError(f"{group}._target_={target!r} cannot be imported ({e}). Fix: pick an existing "
                          f"{group} option (`rewardflow --help` lists them)") from None


def _check_update_path(cfg: DictConfig) -> None:
    """model.activation_checkpointing and model.compile (docs/performance.md), where the model has them."""
    if "activation_checkpointing" in cfg.model:
        from models.activation_checkpointing import resolve_activation_checkpointing

        resolve_activation_checkpointing(cfg.model.activation_checkpointing, cfg.model.activation_checkpointing_k)
    if cfg.model.get("compile"):
        from models.common import resolve_device
        from models.compiled_blocks import compile_unavailable_reason

        reason = compile_unavailable_reason(resolve_device(cfg.model.get("device", "auto")))
        if reason is not None:
            raise ConfigError(f"model.compile=true: {reason}. Fix: model.compile=false")


def validate(cfg: DictConfig) -> list[str]:
    """Raise :class:`ConfigError` if the config cannot run; return the prompts it will use (already loaded)."""
    t = cfg.trainer
    if t.steps < 1:
        raise ConfigError(f"trainer.steps must be >= 1 (got {t.steps})")
    if t.max_grad_norm < 0:
        raise ConfigError(f"trainer.max_grad_norm must be >= 0 (got {t.max_grad_norm}); 0 disables clipping")
    if t.max_nonfinite_in_a_row < 1:
        raise ConfigError(f"trainer.max_nonfinite_in_a_row must be >= 1 (got {t.max_nonfinite_in_a_row})")
    if t.sample_every < 0:
        raise ConfigError(f"trainer.sample_every must be >= 0 (got {t.sample_every}); 0 disables image grids")
    if cfg.optimizer.lr <= 0:
        raise ConfigError(f"optimizer.lr must be > 0 (got {cfg.optimizer.lr})")

    method_cls = _component(cfg, "method")
    method_cls.check_config(cfg)
    reward_cls = _component(cfg, "reward")
    if method_cls.requires_differentiable_reward and not reward_cls.is_differentiable(cfg.reward):
        raise ConfigError(f"method={cfg.method.name} needs a differentiable reward, but reward={cfg.reward.name} "
                          f"is not. Fix: choose a differentiable reward (e.g. reward=color)")
    _component(cfg, "model")
    if cfg.model.get("finetune") not in (None, "full", "lora"):
        raise ConfigError(f"model.finetune must be full or lora (got {cfg.model.finetune!r})")
    _check_update_path(cfg)

    if OmegaConf.is_missing(cfg.data, "path"):
        raise ConfigError("data.path is required with data=file. Fix: data.path=/path/prompts.txt (one prompt per "
                          "line) or a .jsonl file with key data.field")
    prompts = load_prompts(cfg.data.prompts, cfg.data.path, cfg.data.field)
    try:
        reward_cls.check_config(cfg.reward, prompts)    # the prompts, and e.g. weights present when offline
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return prompts
