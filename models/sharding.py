"""FSDP2 sharding of a diffusers backbone: the backbone's side of ``parallelize``.

Owns: :class:`ShardingMixin`, which decides *what* is sharded (the trainable transformer and a full-fine-tuning
reference copy, one FSDP unit per block of the family's ``block_attrs``; a LoRA base with
``model.base_sharding=replicate`` left whole on every rank) and, after a sharded start-up on the meta device, has
each rank read its own shards (``models/sharded_load.py``). *How* a module is sharded (``fully_shard`` per block with
a ``MixedPrecisionPolicy``, the root last) is ``models/parallelize.py``, torchtitan style. This mixin is a module of
its own, not part of ``models/parallelize.py``, because that module imports ``torch.distributed.fsdp`` at import time
and the families are imported by every config check; here FSDP is imported only when a backbone is sharded.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

from models.backbone_config import Finetune
from models.common_config import BaseSharding
from models.finetune import ADAPTER_NAME


class ShardingMixin:
    block_attrs: tuple[str, ...]  # the family's block lists, in forward order (one FSDP unit each)

    # set by DiffusersBackbone._init_common, LoadingMixin._load_transformer and FinetuneMixin
    transformer: nn.Module
    device: torch.device
    dtype: torch.dtype
    path: str
    finetune: str
    base_sharding: BaseSharding
    loader: Any  # models.loading.ComponentLoader
    _materialized: bool
    _transformer_subfolder: str
    _reference_model: Any
    # methods of FrozenReference / FinetuneMixin (annotations only, so that nothing here shadows them in the MRO)
    transformer_modules: Callable[[], list[nn.Module]]
    _load_adapters: Callable[[dict[str, torch.Tensor]], None]

    def transformer_blocks(self, module: nn.Module | None = None) -> list[nn.Module]:
        """The transformer blocks (one FSDP unit each), in forward order."""
        from models.parallelize import transformer_blocks

        return transformer_blocks(module if module is not None else self.transformer, self.block_attrs)

    @classmethod
    def shard_transformer(cls, module: nn.Module, mesh, **kwargs) -> nn.Module:
        """FSDP2 over a transformer of this family (``kwargs``: :func:`models.parallelize.parallelize_blocks`'s):
        one unit per block of ``block_attrs``, the root last."""
        from models.parallelize import parallelize_blocks, transformer_blocks

        return parallelize_blocks(module, transformer_blocks(module, cls.block_attrs), mesh, **kwargs)

    def parallelize(self, mesh, reshard_after_forward: bool = True, mp_policy=None) -> None:
        """Shard the trainable transformer (and a full-fine-tuning reference copy) with FSDP2, torchtitan style
        (:meth:`shard_transformer`; activation checkpointing was applied at construction from
        ``model.activation_checkpointing``): ``fully_shard`` on each of the family's ``block_attrs`` blocks with a
        ``MixedPrecisionPolicy``, the root last. The reference keeps its own dtype and is gathered in the compute
        dtype; a LoRA base with ``model.base_sharding=replicate`` is left out of the shards. Text encoders and the VAE
        stay replicated and unsharded. After a sharded start-up each rank then reads its own shards from the
        checkpoint (``models/sharded_load.py``). Call on every rank, before the optimizer is built (it must see the
        sharded parameters)."""
        from torch.distributed.fsdp import MixedPrecisionPolicy

        from models.sharded_load import lora_layers

        replicated: set[nn.Parameter] = set()
        if self.finetune == Finetune.lora and self.base_sharding == BaseSharding.replicate:
            adapters = {p for _, layer in lora_layers(self.transformer) for p in layer.parameters() if p.requires_grad}
            replicated = {p for p in self.transformer.parameters() if p not in adapters}
        for module in self.transformer_modules():
            is_ref = module is self._reference_model
            policy = MixedPrecisionPolicy(param_dtype=self.dtype) if is_ref and mp_policy is None else mp_policy
            self.shard_transformer(
                module,
                mesh,
                mp_policy=policy,
                reshard_after_forward=reshard_after_forward,
                ignored_params=replicated if module is self.transformer else None,
            )
        if not self._materialized:
            self._load_shards()
        self._materialized = True
        self._after_materialize()

    def _load_shards(self) -> None:
        """Each rank reads its shards of the policy (and reference) from the transformer's safetensors files; LoRA
        adapters are drawn from rank 0's seed, as the single-process path draws them."""
        from models.sharded_load import initial_adapter_state, materialize_and_load, weights_folder
        from rewardflow.distributed import broadcast_object

        folder = weights_folder(self.path, self._transformer_subfolder, self.loader.is_local)
        for module in self.transformer_modules():
            materialize_and_load(module, folder, self.device)
        if self.finetune == "lora":
            seed = broadcast_object(torch.initial_seed())
            self._load_adapters(initial_adapter_state(self.transformer, ADAPTER_NAME, seed))

    def _after_materialize(self) -> None:
        """Hook for tensors derived from the transformer at construction (none by default)."""
