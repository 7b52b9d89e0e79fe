"""Never checkpoint a broken model (issue 26 item 4, docs/resume.md#broken-steps): a step whose update was skipped or
whose weights exploded (finite, but far beyond their start norm) is not checkpointed and counts towards
``trainer.max_nonfinite_in_a_row``, so the last good checkpoint survives pruning and the run resumes from it."""

from __future__ import annotations

import pytest
import torch

from conftest import compose
from launcher.train.trainer import RunInfo, Trainer, TrainingAborted
from launcher.validate import validate
from rewardflow.errors import ConfigError

RUN = [
    "experiment=smoke",
    "logger=none",
    "trainer.steps=8",
    "trainer.ckpt_every=1",
    "trainer.keep_last_ckpts=2",
    "trainer.max_nonfinite_in_a_row=2",
    "trainer.export=false",
]


def test_exploded_weights_are_never_checkpointed_and_the_run_resumes_from_the_last_good_step(tmp_path, caplog):
    trainer = Trainer(compose(RUN), RunInfo(run_dir=tmp_path))
    original, saved = trainer.updates.run, {}

    def exploding_from_step_3(rollout, generator):
        out = original(rollout, generator)
        step = len(trainer.logger.history)  # rows logged so far: one per step (no evaluation in this run)
        if step == 2:  # the update of step 2 is good: remember its weights
            saved.update({n: p.detach().clone() for n, p in trainer.backbone.transformer.named_parameters()})
        if step >= 3:  # steps 3 and 4: an update that blows the weights up
            with torch.no_grad():
                for p in trainer.params:
                    p.mul_(1e4)
        return out

    trainer.updates.run = exploding_from_step_3
    with pytest.raises(TrainingAborted, match="exploded weights") as err:
        trainer.fit()
    assert "trainer.resume_from=" in str(err.value)
    assert "weights exploded" in caplog.text and "step 3 is not checkpointed" in caplog.text
    rows = trainer.logger.history
    assert rows[3]["health/weight_norm"] > 100 * rows[0]["health/weight_norm"]
    assert [p.name for p in trainer.checkpoints.complete()] == ["step_00000001", "step_00000002"]

    resumed = Trainer(compose(RUN), RunInfo(run_dir=tmp_path))
    assert resumed.start_step == 3
    resumed.run_lock.release()
    # the abort message's fix: a lower rate from the last good checkpoint, in a new run dir
    sane = Trainer(compose([*RUN, "optimizer.lr=1e-4", f"trainer.resume_from={tmp_path}"]), RunInfo(tmp_path / "b"))
    assert sane.start_step == 3 and sane.optimizer.param_groups[0]["lr"] == 1e-4
    sane.run_lock.release()
    for name, p in resumed.backbone.transformer.named_parameters():
        if name in saved and p.requires_grad:
            assert torch.equal(p.detach(), saved[name]), name


def test_an_absurd_learning_rate_writes_no_checkpoint(tmp_path, caplog):
    trainer = Trainer(compose([*RUN, "optimizer.lr=1e30"]), RunInfo(run_dir=tmp_path))
    with pytest.raises(TrainingAborted):
        trainer.fit()
    assert trainer.checkpoints.complete() == []
    assert "weights exploded" in caplog.text or "not finite" in caplog.text


@pytest.mark.parametrize("value", ["-1", "nan", "inf"])
def test_max_weight_growth_must_be_finite_and_not_negative(value):
    with pytest.raises(ConfigError, match="trainer.max_weight_growth"):
        validate(compose([f"trainer.max_weight_growth={value}"]))
