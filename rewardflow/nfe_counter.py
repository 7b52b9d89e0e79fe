"""Counts transformer evaluations (NFE) in forward and backward, per sample.

Methods are compared by how many transformer passes they need, so the count is taken on the model itself, not
assumed: a forward over a batch of B rows adds B; a backward through that output adds B. A batched forward of two
JAGG endpoints is 2 forward and 2 backward sample-evaluations, exactly like two single-sample passes.
"""

from __future__ import annotations

import torch
from torch import nn


class NFECounter:
    """Attach to modules whose first positional/keyword input has the batch on dim 0 (the trainable transformer and,
    where it is a separate module, the frozen reference copy)."""

    def __init__(self, modules: nn.Module | list[nn.Module], input_key: str = "hidden_states"):
        self.forward = 0
        self.backward = 0
        self._key = input_key
        modules = modules if isinstance(modules, (list, tuple)) else [modules]
        self._handles = [m.register_forward_hook(self._on_forward, with_kwargs=True) for m in modules]

    def _batch(self, args, kwargs) -> int:
        x = kwargs.get(self._key, args[0] if args else None)
        return int(x.shape[0]) if torch.is_tensor(x) else 1

    def _on_forward(self, module, args, kwargs, output):
        n = self._batch(args, kwargs)
        self.forward += n
        out = output[0] if isinstance(output, (tuple, list)) else getattr(output, "sample", output)
        if torch.is_tensor(out) and out.requires_grad:

            def on_grad(grad, n=n):
                self.backward += n

            out.register_hook(on_grad)

    def snapshot(self) -> tuple[int, int]:
        return self.forward, self.backward

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
