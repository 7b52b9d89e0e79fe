"""``reward=multi``: a weighted sum of named rewards, ``sum_i w_i * normalize_i(score_i)``.

Components are ordinary reward configs composed into ``reward.components.<name>`` (``conf/reward/multi.yaml``
pulls in the ``hps``, ``pickscore`` and ``clip`` options), with weights in ``reward.weights.<name>``. Each
component's raw score (its own convention, before normalisation and weighting) is logged as ``reward/<name>``, and
its spread as ``reward/<name>_std``, averaged over the calls of a step. A component with weight 0 is scored and
logged but not optimised: a held-out evaluation reward.

The sum is differentiable when every component with a non-zero weight is; non-differentiable components are scored
under ``no_grad``. Videos are reduced once, on the weighted per-frame sum, by this reward's ``frame_reduce``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import torch
from hydra.utils import get_class
from torch import nn

from rewardflow.errors import ConfigError, ConfigErrors
from rewards.base import Reward
from rewards.base_config import RewardConfig
from rewards.multi_config import RESERVED, MultiRewardConfig
from rewards.normalization import ScoreNormalizer

#: metric names the trainer already uses under reward/


def component_class(cfg: RewardConfig, key: str) -> type[Reward]:
    """The reward class a component's config names (``<key>._target_``)."""
    target = getattr(cfg, "_target_", None)
    try:
        cls = get_class(target)
    except Exception as e:  # noqa: BLE001 - hydra wraps import errors
        raise ConfigError(
            f"{key}._target_={target!r} cannot be imported ({e}). Fix: compose the component from a "
            f"reward option, e.g. +reward@reward.components.<name>=hps"
        ) from None
    if not (isinstance(cls, type) and issubclass(cls, Reward)):
        raise ConfigError(f"{key}._target_={target!r} is not a rewards.base.Reward")
    return cls


class MultiReward(Reward[MultiRewardConfig]):
    """Weighted sum of component rewards, built from its typed config
    (:class:`rewards.multi_config.MultiRewardConfig`): each of ``cfg.components`` is built from its own config and
    weighted by ``cfg.weights[name]`` after ``cfg.normalize`` (:mod:`rewards.normalization`). ``components`` gives
    rewards already built instead (code that composes rewards itself)."""

    #: the config-dependent answer is :meth:`is_differentiable`; an instance sets its own
    differentiable = True

    def __init__(self, cfg: MultiRewardConfig, components: Mapping[str, Reward] | None = None):
        super().__init__(cfg)
        if components is None:
            components = {n: component_class(c, f"reward.components.{n}")(c) for n, c in cfg.components.items()}
        components, weights = dict(components), {k: float(v) for k, v in dict(cfg.weights).items()}
        if not components or set(components) != set(weights):
            raise ValueError(
                f"reward=multi needs one weight per component: components {sorted(components)}, "
                f"weights {sorted(weights)}"
            )
        self.components = nn.ModuleDict(components)
        self.weights = weights
        self.normalizers = nn.ModuleDict({n: ScoreNormalizer(cfg.normalize, cfg.norm_momentum) for n in components})
        self.differentiable = all(c.differentiable or weights[n] == 0 for n, c in components.items())
        self._sums: dict[str, list[float]] = {}

    # -- config checks (before anything is built) ----------------------------------------------------------------
    @classmethod
    def check_with_code(cls, cfg: Any, errors: ConfigErrors) -> None:
        super().check_with_code(cfg, errors)
        components = cfg.reward.components
        for n, c in components.items():
            if n in RESERVED or "/" in n:
                continue  # MultiRewardConfig.check reports the name
            with errors.collect():
                component = component_class(c, errors.key(f"reward.components.{n}"))
                component.check_with_code(
                    dataclasses.replace(cfg, reward=c), errors.under("reward", f"reward.components.{n}")
                )

    @classmethod
    def is_differentiable(cls, cfg: MultiRewardConfig) -> bool:
        return all(
            cfg.weights.get(n, 1.0) == 0 or component_class(c, f"reward.components.{n}").is_differentiable(c)
            for n, c in cfg.components.items()
        )

    # -- scoring --------------------------------------------------------------------------------------------------
    def score(self, images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        return self._combine({n: self._raw(n, c, images, prompts) for n, c in self.components.items()})

    def score_chunks(self, chunks) -> torch.Tensor:
        """Raw component scores chunk by chunk, then one normalisation over the whole batch: the scores one call
        over the batch gives (a chunk's own statistics would differ)."""
        raws: dict[str, list[torch.Tensor]] = {n: [] for n in self.components}
        frames = 0
        for images, prompts in chunks:
            flat, flat_prompts, frames = self.flatten_frames(images, prompts)
            for n, c in self.components.items():
                raws[n].append(self._raw(n, c, flat, flat_prompts))
        return self.reduce(self._combine({n: torch.cat(r) for n, r in raws.items()}), frames).float()

    def _raw(self, name: str, component: Reward, images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        w = self.weights[name]
        with torch.set_grad_enabled(torch.is_grad_enabled() and component.differentiable and w != 0):
            raw = component.score(images, prompts).float()
        self._record(name, raw)
        return raw

    def _combine(self, raws: dict[str, torch.Tensor]) -> torch.Tensor:
        total = None
        for n, raw in raws.items():
            w = self.weights[n]
            if w != 0:
                term = w * self.normalizers[n](raw)
                total = term if total is None else total + term
        if total is None:  # every weight 0: logging-only run
            first = next(iter(raws.values()))
            total = torch.zeros(first.shape[0], device=first.device)
        return total

    @torch.no_grad()
    def evaluate(self, images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        """The weighted sum of the components' raw scores, not normalised: training's normalisers keep running
        statistics and batch z-scores depend on the batch, so neither belongs on a fixed ruler (with
        ``normalize=none`` this is the trained reward). Training's statistics and logged sums stay untouched."""

        def raw_sum(frames: torch.Tensor, frame_prompts: list[str]) -> torch.Tensor:
            terms = [
                self.weights[n] * c.score(frames, frame_prompts).float()
                for n, c in self.components.items()
                if self.weights[n] != 0
            ]
            return sum(terms) if terms else torch.zeros(frames.shape[0], device=frames.device)

        return self.per_image(raw_sum, images, prompts)

    def _record(self, name: str, raw: torch.Tensor) -> None:
        x = raw.detach().double()
        s = self._sums.setdefault(name, [0.0, 0.0, 0.0])
        s[0] += x.numel()
        s[1] += float(x.sum())
        s[2] += float((x * x).sum())

    def step_metrics(self) -> dict[str, float]:
        """``reward/<name>`` (mean raw score) and ``reward/<name>_std`` over the calls since the last step."""
        out = {}
        for name, (n, total, squares) in self._sums.items():
            mean = total / n
            out[f"reward/{name}"] = mean
            out[f"reward/{name}_std"] = max(squares / n - mean * mean, 0.0) ** 0.5
        self._sums = {}
        return out
