"""Checkpoint / resume in one process: an interrupted run resumed from its latest complete checkpoint ends with
exactly the parameters and metrics of an uninterrupted run, with checkpoints written synchronously or in the
background (trainer.async_checkpoint); a writer killed mid-checkpoint leaves nothing that resume would pick up."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch

from conftest import ROOT, compose
from launcher.checkpoint.manager import CheckpointManager
from launcher.train.trainer import RunInfo, Trainer
from rewardflow.distributed import World

STEPS = ["experiment=smoke", "logger=none", "trainer.steps=6", "trainer.ckpt_every=2"]


def metrics(run_dir):
    rows = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


def params(trainer):
    return {k: v.detach().clone() for k, v in trainer.backbone.transformer.named_parameters()}


class Crash(RuntimeError):
    pass


@pytest.mark.parametrize("async_checkpoint", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("finetune", ["full", "lora"])
def test_interrupted_run_resumes_bitwise(tmp_path, finetune, async_checkpoint):
    """Also with trainer.async_checkpoint=true: the optimizer steps that follow a save while it is written in the
    background do not leak into it, and the save of step 3 is committed although the run then crashes."""
    cfg = compose(
        [
            *STEPS,
            f"model.finetune={finetune}",
            "model.lora_rank=4",
            f"trainer.async_checkpoint={str(async_checkpoint).lower()}",
        ]
    )
    ref = Trainer(cfg, RunInfo(run_dir=tmp_path / "ref"))
    ref.fit()

    broken = Trainer(cfg, RunInfo(run_dir=tmp_path / "run"))
    original = broken.train_step

    def crash_after_4(step):
        out = original(step)
        if step == 4:  # steps 0-4 logged, last checkpoint after step 3
            raise Crash("simulated node failure")
        return out

    broken.train_step = crash_after_4
    with pytest.raises(Crash):
        broken.fit()
    assert [p.name for p in broken.checkpoints.complete()] == ["step_00000001", "step_00000003"]

    resumed = Trainer(cfg, RunInfo(run_dir=tmp_path / "run"))
    assert resumed.start_step == 4 and resumed.wallclock > 0
    resumed.fit()
    ref_p, res_p = params(ref), params(resumed)
    assert all(torch.equal(ref_p[k], res_p[k]) for k in ref_p)
    assert metrics(tmp_path / "run") == metrics(tmp_path / "ref")  # every step once, same values
    # the optimizer state came back too (Adam moments of the last update are identical)
    s_ref, s_res = ref.optimizer.state_dict()["state"], resumed.optimizer.state_dict()["state"]
    assert all(torch.equal(s_ref[i]["exp_avg"], s_res[i]["exp_avg"]) for i in s_ref)


def test_resume_false_starts_over(tmp_path):
    cfg = compose(STEPS)
    Trainer(cfg, RunInfo(run_dir=tmp_path)).fit()
    again = Trainer(compose([*STEPS, "trainer.resume=false"]), RunInfo(run_dir=tmp_path))
    assert again.start_step == 0


KILLED_WRITER = textwrap.dedent("""
    import os, sys, time, torch
    import torch.distributed.checkpoint as dcp
    from launcher.checkpoint.manager import CheckpointManager
    from rewardflow.distributed import World
    root = sys.argv[1]
    model = torch.nn.Linear(4, 4)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 4)).sum().backward(); opt.step()
    mgr = CheckpointManager(root, World(), keep_last=2)
    mgr.save(1, model, opt, {"wallclock_s": 1.0})
    real_save = dcp.save
    def slow_save(*a, **k):
        real_save(*a, **k)                      # shards are on disk ...
        print("WRITING", flush=True)
        time.sleep(60)                          # ... and the writer dies before the checkpoint is complete
    dcp.save = slow_save
    import launcher.checkpoint.manager as c; c.dcp.save = slow_save
    mgr.save(2, model, opt, {"wallclock_s": 2.0})
""")


def test_killed_writer_leaves_no_checkpoint_that_resume_would_pick(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "WRITING"
    proc.kill()
    proc.wait(timeout=30)
    mgr = CheckpointManager(tmp_path, World())
    assert (tmp_path / ".step_00000002.tmp" / ".metadata").exists()  # half-written, left behind
    assert mgr.latest() == tmp_path / "step_00000001"  # ... but never picked up
    model = torch.nn.Linear(4, 4)
    opt = torch.optim.AdamW(model.parameters())
    assert mgr.load(mgr.latest(), model, opt)["step"] == 1
    mgr.save(2, model, opt, {})  # the next writer cleans up and succeeds
    assert mgr.latest() == tmp_path / "step_00000002" and not (tmp_path / ".step_00000002.tmp").exists()


class DyingBackend:
    """A dashboard whose service dies after ``alive`` rows, silently for the first ``silent`` ones (as W&B's does
    when SLURM's SIGTERM kills its service: wandb.log raises only a few calls later)."""

    def __init__(self, alive, silent=0, held=None):
        self.rows, self.alive, self.silent, self.run_id = list(held or []), alive, silent, "abc"
        self.calls = 0

    def log(self, row, step):
        self.calls += 1
        if self.calls > self.alive + self.silent:
            raise ConnectionResetError("Connection lost")
        if self.calls <= self.alive:
            self.rows.append(dict(row))

    def last_step(self):
        return max((int(r["step"]) for r in self.rows), default=-1)

    def finish(self, exit_code=0):
        raise ConnectionResetError("Connection lost")


def test_a_dead_dashboard_never_stops_training_and_the_resumed_run_backfills_it(tmp_path):
    from launcher.tracking.run_logger import RunLogger

    first = DyingBackend(alive=2, silent=2)
    logger = RunLogger(tmp_path, first)
    for step in range(6):
        logger.log({"step": step, "reward/mean": 0.1 * step})
    logger.finish()  # does not raise either
    assert [r["step"] for r in first.rows] == [0, 1]  # steps 2-3 vanished silently, 4-5 raised
    second = DyingBackend(alive=100, held=first.rows)
    resumed = RunLogger(tmp_path, second, resume=True)
    resumed.log({"step": 5, "reward/mean": 0.5})  # replayed after the checkpoint: not logged again
    resumed.log({"step": 6, "reward/mean": 0.6})
    assert [r["step"] for r in second.rows] == [0, 1, 2, 3, 4, 5, 6]  # each step exactly once
    assert [r["step"] for r in resumed.history] == list(range(7))
