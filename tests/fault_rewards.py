"""Rewards that misbehave on purpose, for end-to-end runs through the CLI (imported through PYTHONPATH=tests)."""

from __future__ import annotations

from rewards.color import ColorReward


class NaNOnLastStep(ColorReward):
    """The colour reward, NaN for every sample of the ``nan_on_call``-th step (one call per step): a run whose last
    step has no finite reward, as a NaN weight in ``reward=multi`` produced."""

    nan_on_call = 3
    calls = 0

    def score(self, images, prompts):
        NaNOnLastStep.calls += 1
        out = super().score(images, prompts)
        return out * float("nan") if NaNOnLastStep.calls == self.nan_on_call else out


class BrokenScorer(ColorReward):
    """A reward whose scoring fails at run time (what config checks cannot see, e.g. a scorer that runs out of
    memory): a job that fails in the middle of a sweep."""

    def score(self, images, prompts):
        raise RuntimeError("BrokenScorer: scoring failed on purpose")
