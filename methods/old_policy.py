"""DiffusionNFT's sampling policy ``v_old``: a copy of the trainable parameters that lags behind them.

The authors keep it as a second LoRA adapter named ``old`` in the same transformer (NVlabs/DiffusionNFT
``scripts/train_nft_sd3.py``: created at lines 438-444, copied from the trained adapter at 576-580, selected for
every rollout at 640 and for the ``v_old`` forward of the loss at 873), and after each rollout's updates move it
towards the trained weights, parameter by parameter (so LoRA's A and B separately):
``theta_old <- d theta_old + (1 - d) theta`` (lines 1034-1039), with ``d`` from :func:`old_policy_decay`.

:class:`LaggingPolicy` does the same for any trainable set: the adapter in LoRA mode (their case), every weight in
full fine-tuning (their code has no full-model path). To evaluate ``v_old`` the copy is written into the model's own
parameters and the trained values are put back afterwards, so there is one module (the pass counters, the
reference context and FSDP2's shards all stay as they are). Under FSDP2 the copies are DTensors sharded like the
parameters, and every FSDP module is resharded after each swap so no unsharded parameter of the other policy
survives it (the root group keeps its parameters gathered after a forward without gradients). Build it after
:meth:`~models.backbone.Backbone.parallelize`, as the trainer builds methods.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch
from torch import nn


def old_policy_decay(optimizer_steps: int, flat: int, rate: float, maximum: float) -> float:
    """``d`` after ``optimizer_steps`` optimizer steps: 0 for the first ``flat`` steps, then
    ``min(rate x (steps - flat), maximum)`` (their ``return_decay``, train_nft_sd3.py:169-189; decay_type 1 is
    (0, 0.001, 0.5), decay_type 2 (75, 0.0075, 0.999), decay_type 0 (0, 0, 0): v_old = v after every rollout)."""
    if optimizer_steps < flat:
        return 0.0
    return min((optimizer_steps - flat) * rate, maximum)


def _reshard(module: nn.Module) -> None:
    from torch.distributed.fsdp import FSDPModule

    for m in module.modules():
        if isinstance(m, FSDPModule):
            m.reshard()


class LaggingPolicy:
    """A lagging copy of ``module``'s trainable parameters (those with ``requires_grad``) at construction."""

    def __init__(self, module: nn.Module):
        self.module = module
        self.names = [n for n, p in module.named_parameters() if p.requires_grad]
        with torch.no_grad():
            self.copies = {n: p.detach().clone() for n, p in module.named_parameters() if p.requires_grad}

    def _params(self) -> list[nn.Parameter]:
        named = dict(self.module.named_parameters())
        return [named[n] for n in self.names]

    @torch.no_grad()
    def update(self, decay: float) -> None:
        """``copy <- decay copy + (1 - decay) parameter`` for every trainable parameter."""
        for p, c in zip(self._params(), self.copies.values()):
            c.mul_(decay).add_(p.detach(), alpha=1.0 - decay)

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """The module evaluates the lagging copy inside this context (no gradients may flow through it)."""
        params = self._params()
        with torch.no_grad():
            trained = [p.detach().clone() for p in params]
            for p, c in zip(params, self.copies.values()):
                p.copy_(c)
        _reshard(self.module)
        try:
            yield
        finally:
            with torch.no_grad():
                for p, t in zip(params, trained):
                    p.copy_(t)
            _reshard(self.module)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The copies, by parameter name; loading writes into these tensors in place (DCP)."""
        return {f"old_policy.{n}": c for n, c in self.copies.items()}
