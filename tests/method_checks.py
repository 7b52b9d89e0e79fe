"""Checks every method's test file runs alike: a crashed run resumes bitwise, and the helpers of its 2-rank FSDP2
test (shard the backbone over the process group, read the full gradients).

``crash_and_resume(cfg, tmp_path)`` trains ``cfg`` uninterrupted, trains it again with a crash after step
``crash_after``, resumes from the run folder, and asserts what tests/test_resume.py asserts for the default method:
the resumed run starts where the last checkpoint left it and ends with the uninterrupted run's metrics (``time/*``
aside) and transformer parameters, bit for bit. It returns both trainers for a method's own checks (its EMA policy,
its window)."""

from __future__ import annotations

import json
from typing import Callable

import pytest
import torch

from launcher.train.trainer import RunInfo, Trainer


def metrics_without_time(run_dir) -> list[dict]:
    """``metrics.jsonl``'s rows without the ``time/*`` keys (wall-clock differs between runs)."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


def crash_and_resume(
    cfg, tmp_path, crash_after: int = 2, resumes_at: int = 2, on_resume: Callable[[Trainer], None] | None = None
) -> tuple[Trainer, Trainer]:
    """See the module docstring; ``on_resume`` checks the resumed trainer before it trains (e.g. its iteration)."""
    ref = Trainer(cfg, RunInfo(run_dir=tmp_path / "ref"))
    ref.fit()
    broken = Trainer(cfg, RunInfo(run_dir=tmp_path / "run"))
    original = broken.train_step

    def crash(step):
        out = original(step)
        if step == crash_after:
            raise RuntimeError("simulated node failure")
        return out

    broken.train_step = crash
    with pytest.raises(RuntimeError, match="simulated"):
        broken.fit()
    resumed = Trainer(cfg, RunInfo(run_dir=tmp_path / "run"))
    assert resumed.start_step == resumes_at
    if on_resume is not None:
        on_resume(resumed)
    resumed.fit()
    assert metrics_without_time(tmp_path / "run") == metrics_without_time(tmp_path / "ref")
    mine = dict(resumed.backbone.transformer.named_parameters())
    for k, v in ref.backbone.transformer.named_parameters():
        assert torch.equal(v, mine[k]), k
    return ref, resumed


def at_iteration(n: int) -> Callable[[Trainer], None]:
    """An ``on_resume`` check: the method's training iteration (which draws its SDE steps or moves its window) came
    back with the checkpoint."""

    def check(trainer: Trainer) -> None:
        assert int(trainer.method.iteration) == n

    return check


def shard(backbone) -> None:
    """FSDP2 over every rank of the process group (the ``parallelize`` hook of a test's method)."""
    from torch.distributed.device_mesh import init_device_mesh

    backbone.parallelize(init_device_mesh("cpu", (torch.distributed.get_world_size(),)))


def full_grads(module) -> dict[str, torch.Tensor]:
    """Every parameter's gradient, gathered whole when it is a sharded DTensor."""
    return {
        k: (p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad).detach().clone()
        for k, p in module.named_parameters()
        if p.grad is not None
    }
