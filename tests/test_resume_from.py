"""``trainer.resume_from`` (issue 16, docs/resume.md): a new run dir starts from another run's checkpoint, with that
run's metric rows up to it and a new W&B run; a run dir's own checkpoints come first (a requeued job keeps its
progress); bad values fail before any model is built, naming the key."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
import torch

from conftest import ROOT, compose, rewardflow_cmd
from launcher.tracking.wandb_offline import find_offline_runs, read_offline_run
from launcher.train.trainer import RunInfo, Trainer
from launcher.validate import validate
from rewardflow.errors import ConfigError

RUN = [
    "experiment=smoke",
    "trainer.steps=6",
    "trainer.ckpt_every=2",
    "trainer.keep_last_ckpts=3",
    "trainer.threads=1",
    "trainer.export=false",
]


def params(trainer):
    return {k: v.detach().clone() for k, v in trainer.backbone.transformer.named_parameters()}


def untimed_rows(run_dir):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A finished 6-step run (W&B offline) with checkpoints after steps 1, 3 and 5."""
    run_dir = tmp_path_factory.mktemp("source")
    trainer = Trainer(compose(RUN), RunInfo(run_dir=run_dir))
    trainer.fit()
    return run_dir, params(trainer), untimed_rows(run_dir), read_offline_run(find_offline_runs(run_dir)[0]).run_id


def test_resume_from_a_checkpoint_starts_a_new_run_from_it(source, tmp_path):
    src, final, rows, src_wandb_id = source
    before = sorted(p.name for p in (src / "checkpoints").iterdir())
    cfg = compose([*RUN, f"trainer.resume_from={src / 'checkpoints' / 'step_00000003'}"])
    run = Trainer(cfg, RunInfo(run_dir=tmp_path))
    assert run.start_step == 4
    run.fit()
    assert all(torch.equal(v, final[k]) for k, v in params(run).items())  # steps 4-5 replayed bitwise (CPU)
    assert untimed_rows(tmp_path) == rows  # rows 0-3 copied from the source, 4-5 logged by this run
    (folder,) = find_offline_runs(tmp_path)
    wandb_run = read_offline_run(folder)
    assert wandb_run.run_id != src_wandb_id  # a new W&B run, never the source's
    assert [int(r["step"]) for r in wandb_run.history if "reward/mean" in r] == list(range(6))
    assert sorted(p.name for p in (src / "checkpoints").iterdir()) == before  # the source is only read


def test_a_run_dirs_own_checkpoints_come_before_resume_from(source, tmp_path):
    src, *_ = source
    cfg = compose([*RUN, "trainer.steps=9", "logger=none", f"trainer.resume_from={src}"])
    first = Trainer(cfg, RunInfo(run_dir=tmp_path))
    assert first.start_step == 6  # a run dir means its newest checkpoint (step 5)
    first.train_step(6)
    first.save_checkpoint(6)  # ... then the job is preempted and requeued
    again = Trainer(cfg, RunInfo(run_dir=tmp_path))
    assert again.start_step == 7  # its own progress, not resume_from's step 5 again


def test_resume_false_moves_the_old_checkpoints_aside(source, tmp_path):
    """Starting a run dir over must not leave the old run's later checkpoints where pruning or the next automatic
    resume would take them for this run's."""
    src, *_ = source
    shutil.copytree(src, tmp_path / "run")
    cfg = compose([*RUN, "logger=none", "trainer.steps=2", "trainer.resume=false"])
    run = Trainer(cfg, RunInfo(run_dir=tmp_path / "run"))
    assert run.start_step == 0
    run.fit()
    assert [p.name for p in run.checkpoints.complete()] == ["step_00000001"]  # this run's only
    (aside,) = (tmp_path / "run").glob("checkpoints.before-*")
    assert sorted(p.name for p in aside.iterdir()) == ["step_00000001", "step_00000003", "step_00000005"]
    assert [r["step"] for r in untimed_rows(tmp_path / "run")] == [0, 1]


@pytest.mark.parametrize(
    "value,problem",
    [
        ("/nonexistent/run", "no such folder"),
        ("{tmp}", "neither a run dir"),
        ("{tmp}/checkpoints/step_00000004", "incomplete"),
        ("{tmp}/empty_run", "holds no complete checkpoint"),
    ],
)
def test_bad_resume_from_fails_before_any_model_is_built(value, problem, tmp_path):
    (tmp_path / "checkpoints" / "step_00000004").mkdir(parents=True)  # a writer died: no COMPLETE file
    (tmp_path / "empty_run" / "checkpoints").mkdir(parents=True)
    (tmp_path / "file.txt").write_text("")
    value = value.format(tmp=tmp_path / "file.txt" if problem == "neither a run dir" else tmp_path)
    with pytest.raises(ConfigError) as err:
        validate(compose([f"trainer.resume_from={value}"]))
    assert f"trainer.resume_from={value}" in str(err.value) and problem in str(err.value)
    assert "Fix" in str(err.value)


def test_cli_reports_a_bad_resume_from_without_a_traceback(tmp_path):
    proc = subprocess.run(
        [
            *rewardflow_cmd(),
            "experiment=smoke",
            f"trainer.resume_from={tmp_path / 'nope'}",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2
    assert "trainer.resume_from=" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "run").exists()  # the run folder this command created is removed (launcher/run_check.py)


@pytest.mark.parametrize("scheduler", ["constant", "warmup_constant", "warmup_cosine"])
def test_resume_from_applies_this_runs_learning_rate_at_the_same_point_of_the_schedule(scheduler):
    """The checkpoint's optimizer and schedule state carry the other run's rate; a branch with another
    optimizer.lr trains at that rate (scaled at the same schedule point), not at the old one."""
    from launcher.train.lr_schedule import build_lr_schedule, build_optimizer, rebase

    def run(lr):
        cfg = compose([f"optimizer.lr={lr}", f"optimizer.scheduler={scheduler}", "optimizer.warmup_steps=3"]).optimizer
        opt = build_optimizer(cfg, [torch.nn.Parameter(torch.zeros(2))])
        return cfg, opt, build_lr_schedule(opt, cfg, 10)

    _, old_opt, old_sched = run(1e-3)
    for _ in range(5):
        old_opt.step()
        old_sched.step()
    cfg, opt, sched = run(1e-4)
    opt.load_state_dict(old_opt.state_dict())
    sched.load_state_dict(old_sched.state_dict())
    assert opt.param_groups[0]["lr"] == pytest.approx(old_opt.param_groups[0]["lr"])  # what resume brought back
    rebase(opt, sched, cfg)
    for _ in range(3):
        assert opt.param_groups[0]["lr"] == pytest.approx(old_opt.param_groups[0]["lr"] / 10, rel=1e-9)
        old_opt.step(), old_sched.step(), opt.step(), sched.step()
