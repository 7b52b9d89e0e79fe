"""Fault injection for the SLURM tests (imported inside the jobs through PYTHONPATH=tests)."""

from __future__ import annotations

import time

from methods.dance_grpo import DanceGRPO


class CrashOnRank1(DanceGRPO):
    """DanceGRPO whose rank 1 dies at step 1 (after a rollout), leaving rank 0 inside the step's collectives."""

    calls = 0

    def rollout(self, prompts, generator):
        CrashOnRank1.calls += 1
        if self.world.rank == 1 and CrashOnRank1.calls == 2:
            raise RuntimeError("rank 1 crashed on purpose")
        return super().rollout(prompts, generator)


class SlowDanceGRPO(DanceGRPO):
    """DanceGRPO whose steps take at least 0.6 s more (a sleep before the rollout; the numbers are DanceGRPO's, so
    the run still equals the reference): 100 steps outlast a 1-minute SLURM job on any machine, so the time-limit test
    always needs a requeue (on a quiet machine the plain run finished within the signal's grace period)."""

    def rollout(self, prompts, generator):
        time.sleep(0.6)
        return super().rollout(prompts, generator)
