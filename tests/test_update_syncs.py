"""No host sync inside the micro-batch loop (docs/performance.md#one-host-sync-per-update): on the real trainer, every
method reads tensors back to the host, or copies between host and device, at most 3 times per optimizer update (the
joint skip decision with the gradient norm, the plan's sample indices, and the step's statistics once), counted by
wrapping ``Tensor.item``, ``__float__``, ``tolist``, ``.cpu()``, the other read-backs and the copies (``.to`` a device,
``copy_`` across devices, ``torch.tensor`` of host data on a device) while the updates run
(launcher/train/host_syncs.py). The rollout's count does not grow with its transformer calls."""

from __future__ import annotations

import pytest

from conftest import compose
from launcher.train.host_syncs import COPIES, HostSyncCounter
from launcher.train.trainer import RunInfo, Trainer

MAX_SYNCS_PER_UPDATE = 3
METHODS = {
    "dance_grpo": ["method=dance_grpo"],
    "flow_grpo_kl": ["method=flow_grpo", "method.kl_beta=0.04"],
    "flow_grpo_fast": ["method=flow_grpo_fast", "method.window_range=[0,4]"],
    "jagg": ["method=jagg", "method.sampling_steps=9"],
    "flash_grpo": ["method=flash_grpo"],
    "grpo_guard": ["method=grpo_guard"],
    "mix_grpo_flash": ["method=mix_grpo_flash"],
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


def rollout_syncs(steps: int, tmp_path) -> tuple[int, int, dict]:
    """``(syncs, velocity calls, sites)`` of one DanceGRPO rollout with ``steps`` sampling steps."""
    cfg = compose(["experiment=smoke", "logger=none", f"method.sampling_steps={steps}", "method.rollout_chunk=2"])
    trainer = Trainer(cfg, RunInfo(run_dir=tmp_path / str(steps)))
    calls = []
    velocity = trainer.backbone.velocity
    trainer.backbone.velocity = lambda *a, **k: calls.append(1) or velocity(*a, **k)
    import torch

    with HostSyncCounter() as syncs:
        trainer.method.rollout(trainer.data.batch(0, 2), torch.Generator().manual_seed(0))
    return syncs.total, len(calls), dict(syncs.sites)


def test_rollout_syncs_do_not_grow_with_its_transformer_calls(tmp_path):
    """Issue 27: the sigma table, the prompt rows, the chunk and trajectory indices live on the compute device, so a
    transformer call moves nothing from the host (before: ~36 counted copies per call, 37 sigma-table and 36 embedding
    moves in 12 calls). An extra sampling step (2 calls of 2 rows) adds nothing: its noise is queued from pinned
    memory (``non_blocking``, models.backbone.host_randn)."""
    few, few_calls, _ = rollout_syncs(4, tmp_path)
    many, many_calls, sites = rollout_syncs(8, tmp_path)
    assert many_calls == 2 * few_calls == 16
    assert many == few, sites


def test_the_counter_counts_host_device_copies_but_not_dtype_casts():
    import torch

    x = torch.ones(3)
    with HostSyncCounter() as syncs:
        x.to(torch.float64)  # a cast: no device named
        x.to("cpu")  # names the host: a copy on an accelerator run
        torch.tensor([1, 2], device="cpu")  # Python data to a device
        torch.as_tensor(x, device="cpu")  # already there: nothing to copy
        x.cpu()  # a read-back
    assert syncs.total == 3 and syncs.copies == 2, dict(syncs.sites)
    assert {name for _, name in COPIES} == {"to", "copy_", "tensor", "as_tensor"}
