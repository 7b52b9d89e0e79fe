"""Everything that lets a run stop and continue: DCP checkpoints written by every rank (``manager``) and
asynchronously (``async_save``), loading them without unpickling (``safe_dcp``, ``rng_state``), where a run starts
from (``resume``), SLURM preemption turned into a checkpoint (``preemption``) and one run per run dir (``run_lock``).

A leaf room: it imports no other part of the launcher, only rewardflow, torch and the standard library
(docs/development.md#the-launchers-rooms).
"""
