"""Flow-GRPO-Fast (docs/methods/grpo_baselines.md#the-flow-grpo-fast-window): ODE sampling with one SDE window of
``window_size`` consecutive steps,
whose start is drawn uniformly from ``[lo, hi - size]`` once per rollout batch; only the window is trained.
Outside the window the step is exactly the ODE Euler step (g = 0)."""

from __future__ import annotations

from typing import TypeVar

import torch

from methods.flow_grpo import FlowGRPO
from methods.flow_grpo_fast_config import FlowGRPOFastConfig
from methods.jagg_config import JAGGConfig
from methods.trained_steps import fast_trained

#: the configs the window runs with: Flow-GRPO-Fast's own, and JAGG's over it (``method.base=flow_grpo_fast``), which
#: carries every baseline's keys (``window_size``, ``window_range``) without deriving from their config classes
FastConfigT = TypeVar("FastConfigT", bound=FlowGRPOFastConfig | JAGGConfig)


class FlowGRPOFast(FlowGRPO[FastConfigT]):
    @classmethod
    def trained_per_sample(cls, cfg: FastConfigT) -> int:
        return fast_trained(cfg.window_size, cfg.sampling_steps)

    def window(self, generator: torch.Generator) -> tuple[int, int]:
        size = int(self.cfg.window_size)
        if size == 0:
            return 0, self.sde.num_steps - 1
        lo, hi = (int(v) for v in self.cfg.window_range)
        start = int(torch.randint(lo, hi - size + 1, (1,), generator=generator))
        return start, size

    def stochastic_steps(self, n: int, generator: torch.Generator) -> torch.Tensor:
        start, size = self.window(generator)
        mask = torch.zeros(n, self.sde.num_steps, dtype=torch.bool)
        mask[:, start : start + size] = True
        return mask

    def select_train_steps(self, stochastic: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        cols = stochastic[0].nonzero().flatten()
        return cols.expand(stochastic.shape[0], -1).clone()
