"""Evaluation and EMA under FSDP2 with 2 gloo processes (docs/evaluation.md#tested-invariants): each rank keeps the
EMA of its own shards (never gathered), the sharded EMA update is the exponential average, checkpoints restore the
sharded averages bitwise, and the ranks evaluate their shares of the held-out samples and agree on the gathered
scores, which equal a single process's."""

from __future__ import annotations

import json

import pytest
import torch

from dist_utils import run_distributed

pytestmark = pytest.mark.slow

# 5 held-out samples over 2 ranks (3 and 2, one padded), in batches of 2
RUN = [
    "experiment=smoke",
    "logger=none",
    "trainer.export=false",
    "trainer.steps=2",
    "trainer.ema_decay=0.5",
    "eval.every=2",
    "eval.samples_per_prompt=1",
    "~reward@eval.rewards.diversity",  # it compares a prompt's samples: 2 or more
    "eval.batch_size=2",
    "eval.use_ema=true",
    "eval.prompts=[a red car,a green flower,a blue circle,a yellow square,a white cat]",
]


def _ranks(rank, world, run_dir):
    from torch.distributed.tensor import DTensor

    from conftest import compose
    from launcher.train.trainer import RunInfo, Trainer

    cfg = compose(RUN)
    # the ranks are spawned here (tests/dist_utils.py), not by submitit: cluster=local with the multi-rank keys
    cfg.cluster = compose(["cluster=local_multi"]).cluster
    cfg.cluster.name = "local"
    trainer = Trainer(cfg, RunInfo(run_dir=run_dir))
    shards = []
    for p, avg in zip(trainer.params, trainer.ema.averages):
        assert isinstance(p, DTensor) and isinstance(avg, DTensor) and avg.placements == p.placements
        assert avg.to_local().shape == p.to_local().shape  # this rank's shard only
        shards.append(avg.to_local().numel())
    base_eval = trainer.evaluator.maybe_run(0, 0.0)  # before any update: the base model
    trainer.fit()

    # one more sharded update, checked against the exponential average of the full tensors
    before = [a.full_tensor() for a in trainer.ema.averages]
    with torch.no_grad():
        for p in trainer.params:
            p.add_(0.25)
    trainer.ema.update()
    for a, b, p in zip(trainer.ema.averages, before, trainer.params):
        torch.testing.assert_close(a.full_tensor(), 0.5 * b + 0.5 * p.full_tensor(), rtol=0, atol=1e-6)

    final = [a.to_local().clone() for a in trainer.ema.averages]
    trainer.save_checkpoint(1)  # the updated averages, sharded on disk
    resumed = Trainer(cfg, RunInfo(run_dir=run_dir))
    restored = all(torch.equal(a.to_local(), b) for a, b in zip(resumed.ema.averages, final))
    return {
        "base_eval": base_eval,
        "shards": shards,
        "restored": restored,
        "full": sum(p.full_tensor().numel() for p in trainer.params),
    }


def test_ema_is_sharded_and_evaluation_is_gathered_under_two_ranks(tmp_path):
    from conftest import compose
    from launcher.train.trainer import RunInfo, Trainer

    single = Trainer(compose(RUN), RunInfo(run_dir=tmp_path / "single"))  # also builds the twin for the ranks
    reference = single.evaluator.maybe_run(0, 0.0)

    results = run_distributed(_ranks, 2, tmp_path / "sharded", timeout=900)
    assert all(r["restored"] for r in results)
    assert sum(results[0]["shards"]) + sum(results[1]["shards"]) == results[0]["full"]  # the halves, not copies
    scores = [{k: v for k, v in r["base_eval"].items() if k.startswith("eval/")} for r in results]
    assert scores[0] == scores[1] and len(scores[0]) == 4  # every rank has the gathered scores (color, brightness)
    for key in ("eval/color/mean", "eval/color/std", "eval/brightness/mean", "eval/brightness/std"):
        assert results[0]["base_eval"][key] == pytest.approx(reference[key], rel=1e-5)
    rows = [json.loads(l) for l in (tmp_path / "sharded" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "eval/color/mean" in r] == [0, 2]  # rank 0 wrote each point once
    assert (tmp_path / "sharded" / "samples" / "eval_00002.png").exists()
