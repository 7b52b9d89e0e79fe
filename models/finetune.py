"""What is trained: the fine-tuning mode of a diffusers backbone (``model.finetune``).

Owns: :data:`ADAPTER_NAME` and :class:`FinetuneMixin`. LoRA mode freezes the transformer and adds a peft adapter on
``model.lora_targets`` (adapter weights in fp32, seeded as the sharded start-up seeds them); full mode trains every
weight. Either way the frozen reference policy is kept as :class:`models.frozen_reference.FrozenReference` does it
(the adapter switched off, or a frozen copy). The LoRA / full *export* of what was trained is ``models/export.py``.
"""

from __future__ import annotations

from typing import Any

import torch

from models.backbone_config import Finetune
from models.frozen_reference import FrozenReference
from rewardflow.errors import ConfigError

ADAPTER_NAME = "default"  # peft's adapter name for the trained LoRA


class FinetuneMixin(FrozenReference):
    """Called once the transformer is loaded (``DiffusersBackbone._init_training``), before any sharding: peft's
    adapters must exist before ``fully_shard`` (docs/development.md#fsdp2-on-the-cpu)."""

    cfg: Any  # the family's DiffusersModelConfig
    reference_dtype: torch.dtype
    _materialized: bool  # False after a sharded start-up on the meta device: the adapters are loaded with the shards

    def _configure_finetune(self, keep_reference: bool) -> None:
        from models.sharded_load import initial_adapter_state, lora_layers

        cfg = self.cfg
        if cfg.finetune == Finetune.lora:
            from peft import LoraConfig

            self.transformer.requires_grad_(False)
            try:
                self.transformer.add_adapter(
                    LoraConfig(
                        r=cfg.lora_rank,
                        lora_alpha=cfg.lora_alpha,
                        init_lora_weights="gaussian",
                        target_modules=list(cfg.lora_targets),
                    ),
                    adapter_name=ADAPTER_NAME,
                )
            except ValueError as e:
                raise ConfigError(
                    f"model.lora_targets={list(cfg.lora_targets)} match no module of "
                    f"{type(self.transformer).__name__} ({e})"
                ) from None
            for _, layer in lora_layers(self.transformer):  # adapters and their optimizer state in fp32
                for p in layer.parameters():
                    if p.requires_grad:
                        p.data = p.data.float()
            if self._materialized:  # seeded as the sharded start-up seeds them (models/sharded_load.py)
                self._load_adapters(initial_adapter_state(self.transformer, ADAPTER_NAME, torch.initial_seed()))
        else:
            self.transformer.requires_grad_(True)
        self._keep_reference(keep_reference, self.reference_dtype)

    def _load_adapters(self, state: dict[str, torch.Tensor]) -> None:
        from models.sharded_load import load_adapters

        load_adapters(self.transformer, state)
