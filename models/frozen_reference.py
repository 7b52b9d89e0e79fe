"""The frozen reference policy of a fine-tuned backbone (KL terms, the adjoint methods' base velocity): in LoRA mode
the same transformer with its adapters switched off, not a second copy; in full mode a frozen copy, kept only when
the method needs one."""

from __future__ import annotations

import contextlib
import copy
from typing import Iterator

import torch
from torch import nn


class _ReadIn(nn.Module):
    """Parametrization: a weight stored in a lower dtype (``model.reference_dtype``), read in the compute dtype, as
    FSDP2 gathers a sharded reference's blocks (docs/memory.md#weights-and-their-dtypes)."""

    def __init__(self, dtype: torch.dtype):
        super().__init__()
        self.dtype = dtype

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        return weight.to(self.dtype)


class FrozenReference:
    """Mixin for backbones that hold ``transformer`` and ``finetune`` (``lora`` | ``full``) and whose ``velocity``
    evaluates ``self._active``. Call :meth:`_keep_reference` once the trainable transformer is configured."""

    transformer: nn.Module
    finetune: str
    dtype: torch.dtype  # the compute dtype

    def _keep_reference(self, keep: bool, dtype: torch.dtype | None = None) -> None:
        """Keep the frozen copy (full fine-tuning only), stored in ``dtype`` (default: the policy's; bf16 halves it,
        docs/memory.md#weights-and-their-dtypes), with the modules ``from_pretrained`` keeps in fp32 left in fp32."""
        self._reference_model = None
        if keep and self.finetune == "full":
            self._reference_model = copy.deepcopy(self.transformer).requires_grad_(False).eval()
            if dtype is not None:
                from models.sharded_load import cast_like_from_pretrained

                cast_like_from_pretrained(self._reference_model, dtype)
        self._active = self.transformer

    def transformer_modules(self) -> list[nn.Module]:
        return [self.transformer] + ([self._reference_model] if self._reference_model is not None else [])

    def _read_reference_in(self, dtype: torch.dtype) -> None:
        """An unsharded reference stored below the compute ``dtype`` (a bf16 reference in a single-process fp32 run)
        reads each weight in ``dtype`` when used (a parametrization: no second copy; gradients to the inputs flow), so
        it computes as a sharded one, whose blocks FSDP2 gathers in ``dtype``: same values, same arithmetic."""
        from torch.nn.utils import parametrize

        from models.parallelize import is_sharded

        ref = self._reference_model
        if ref is None or is_sharded(ref) or getattr(ref, "_rewardflow_read_in", None) == dtype:
            return
        for module in list(ref.modules()):
            for name, p in list(module.named_parameters(recurse=False)):
                if p.is_floating_point() and p.dtype != dtype and not parametrize.is_parametrized(module, name):
                    parametrize.register_parametrization(module, name, _ReadIn(dtype), unsafe=True)
        ref._rewardflow_read_in = dtype

    @contextlib.contextmanager
    def reference(self) -> Iterator[None]:
        """Context in which ``velocity`` evaluates the frozen reference."""
        if self.finetune == "lora":
            from peft.tuners.tuners_utils import BaseTunerLayer

            layers = [m for m in self.transformer.modules() if isinstance(m, BaseTunerLayer)]
            for m in layers:
                m.enable_adapters(False)
            try:
                yield
            finally:
                for m in layers:
                    m.enable_adapters(True)
            return
        if self._reference_model is None:
            raise RuntimeError("no reference policy was kept: build the backbone with keep_reference=True")
        self._read_reference_in(self.dtype)
        self._active = self._reference_model
        try:
            yield
        finally:
            self._active = self.transformer
