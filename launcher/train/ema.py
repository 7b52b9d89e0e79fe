"""Exponential moving average of the trainable weights (``trainer.ema_decay``; docs/evaluation.md#ema-weights).

``ema <- decay * ema + (1 - decay) * weights`` after every optimizer step, with torch's own update
(:func:`torch.optim.swa_utils.get_ema_multi_avg_fn`). DanceGRPO trains its Flux runs with an EMA of decay 0.995 and
Flow-GRPO / Flash-GRPO evaluate and export EMA weights; here ``eval.use_ema`` evaluates them and
``trainer.export_ema`` exports them.

``trainer.ema_warmup`` ramps the decay in as flow_grpo/ema.py's ``EMAModuleWrapper.get_current_decay`` does (the
EMA NVlabs/DiffusionNFT evaluates and saves): the s-th update (s = 1, 2, ...) uses ``min((1 + s) / (10 + s), decay)``,
so the first updates follow the weights closely instead of averaging them with the pretrained start
(docs/methods/diffusion_nft.md#evaluation-with-the-ema).

Only the trainable parameters are averaged (the LoRA adapter, or every transformer weight when fine-tuning fully),
as clones of the parameters themselves: under FSDP2 a parameter is a sharded ``DTensor``, so its average is the same
shard on the same rank, never gathered. The averages are a state dict keyed by parameter name, saved in the DCP
checkpoint next to the weights (sharded like them) and restored bitwise on resume.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch
from torch import nn
from torch.optim.swa_utils import get_ema_multi_avg_fn

#: the state-dict entry of the warmup's update count (no parameter is named so: parameter names hold no dunder)
UPDATES_KEY = "__ema_updates__"


class ParameterEMA:
    """EMA of ``params`` (the trainable parameters of ``model``), starting at their current values."""

    def __init__(self, model: nn.Module, params: list[nn.Parameter], decay: float, warmup: bool = False):
        if not 0.0 < decay < 1.0:
            raise ValueError(f"trainer.ema_decay must be in (0, 1) (got {decay}); 0 turns the EMA off")
        names = {id(p): n for n, p in model.named_parameters()}
        self.names = [names.get(id(p), f"param_{i}") for i, p in enumerate(params)]
        self.params = list(params)
        self.decay = float(decay)
        self.averages = [p.detach().clone() for p in self.params]
        self._update = get_ema_multi_avg_fn(self.decay)
        self.warmup = bool(warmup)
        # updates so far: the warmup's s, saved with the averages so that a resumed run continues the ramp
        self.updates = torch.zeros((), dtype=torch.int64)

    def current_decay(self) -> float:
        """The decay of the next update: ``decay``, or with warmup ``min((1 + s) / (10 + s), decay)`` for the s-th."""
        if not self.warmup:
            return self.decay
        s = int(self.updates) + 1
        return min((1 + s) / (10 + s), self.decay)

    def update(self) -> None:
        """Fold the current weights into the averages (call after every optimizer step)."""
        update = self._update if not self.warmup else get_ema_multi_avg_fn(self.current_decay())
        update(self.averages, [p.detach() for p in self.params], None)
        self.updates += 1

    @contextlib.contextmanager
    def applied(self) -> Iterator[None]:
        """Context in which the parameters hold the averages (for evaluation and export); the trained weights come
        back bitwise afterwards. Copies in place, so FSDP2's sharded storage stays the parameters' own."""
        trained = [p.detach().clone() for p in self.params]
        with torch.no_grad():
            for p, avg in zip(self.params, self.averages):
                p.copy_(avg)
        try:
            yield
        finally:
            with torch.no_grad():
                for p, w in zip(self.params, trained):
                    p.copy_(w)

    def state_dict(self) -> dict[str, torch.Tensor]:
        # the update count only with warmup, so checkpoints of a plain EMA keep their earlier layout
        return {**dict(zip(self.names, self.averages)), **({UPDATES_KEY: self.updates} if self.warmup else {})}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        missing = [n for n in [*self.names, *([UPDATES_KEY] if self.warmup else [])] if n not in state]
        if missing:
            raise KeyError(f"the EMA state lacks {len(missing)} entr(ies), e.g. {missing[0]}")
        with torch.no_grad():
            for name, avg in zip(self.names, self.averages):
                avg.copy_(state[name])
            if self.warmup:
                self.updates.copy_(state[UPDATES_KEY])
