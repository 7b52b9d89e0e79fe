"""No host sync inside the micro-batch loop (docs/performance.md#one-host-sync-per-update): on the real trainer, every
method reads tensors back to the host at most 3 times per optimizer update (the joint skip decision with the
gradient norm, and the step's statistics once), counted by wrapping ``Tensor.item``, ``__float__``, ``tolist``,
``.cpu()`` and the other read-backs while the updates run (launcher/train/host_syncs.py)."""

from __future__ import annotations

import pytest

from conftest import compose
from launcher.train.host_syncs import HostSyncCounter
from launcher.train.trainer import RunInfo, Trainer

MAX_SYNCS_PER_UPDATE = 3
METHODS = {
    "dance_grpo": ["method=dance_grpo"],
    "flow_grpo_kl": ["method=flow_grpo", "method.kl_beta=0.04"],
    "flow_grpo_fast": ["method=flow_grpo_fast", "method.window_range=[0,4]"],
    "jagg": ["method=jagg", "method.sampling_steps=9"],
    "flash_grpo": ["method=flash_grpo"],
    "eam": ["method=eam", "method.endpoint_nfe=2"],
    "adjoint_matching": ["method=adjoint_matching", "method.loss_last_steps=2", "method.loss_random_steps=1"],
    "diffusion_nft": ["method=diffusion_nft", "method.sampling_steps=3"],
}


@pytest.mark.parametrize("name", list(METHODS))
def test_host_syncs_per_update_are_bounded(name, tmp_path):
    cfg = compose(
        [
            "experiment=smoke",
            "logger=none",
            *METHODS[name],
            "method.group_size=2",
            "method.prompts_per_step=2",
            "method.updates_per_rollout=2",
            "method.update_batch=2",
        ]
    )
    trainer = Trainer(cfg, RunInfo(run_dir=tmp_path))
    counts = []
    run = trainer.updates.run

    def counted(rollout, generator):
        with HostSyncCounter() as syncs:
            out = run(rollout, generator)
        counts.append(syncs)
        return out

    trainer.updates.run = counted
    metrics = trainer.train_step(0)
    assert metrics["health/skipped_updates"] == 0 and "loss" in metrics
    (syncs,) = counts
    per_update = syncs.total / 2
    assert per_update <= MAX_SYNCS_PER_UPDATE, dict(syncs.sites)
    assert syncs.total >= 2  # the decisions themselves are read (the counter sees them)
