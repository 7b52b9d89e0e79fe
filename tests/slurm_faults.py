"""Fault injection for the SLURM tests (imported inside the jobs through PYTHONPATH=tests)."""

from __future__ import annotations

from methods.dance_grpo import DanceGRPO


class CrashOnRank1(DanceGRPO):
    """DanceGRPO whose rank 1 dies at step 1 (after a rollout), leaving rank 0 inside the step's collectives."""

    calls = 0

    def rollout(self, prompts, generator):
        CrashOnRank1.calls += 1
        if self.world.rank == 1 and CrashOnRank1.calls == 2:
            raise RuntimeError("rank 1 crashed on purpose")
        return super().rollout(prompts, generator)
