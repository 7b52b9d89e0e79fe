"""Overrides cannot reach outside (issue 26 item 7, docs/configuration.md#code-from-the-command-line): a command line
that chooses code (a ``_target_`` or its arguments, a Hydra callback) is refused before Hydra instantiates anything,
unless the user opts in with REWARDFLOW_ALLOW_CODE_OVERRIDES=1."""

from __future__ import annotations

import os
import subprocess

import pytest

from conftest import ROOT, rewardflow_cmd
from launcher.override_guard import ENV, code_overrides, grammar_problem, refusal

CODE = [
    "reward._target_=my.Reward",
    "+hydra.callbacks.x._target_=shutil.copyfile",
    "+hydra.callbacks.x._args_=[a,b]",
    "++model._partial_=true",
    "hydra.callbacks=null",
    "~hydra.callbacks.run_dir_check",
    "method._target_=a.B,c.D",
]
PLAIN = ["reward=hps", "optimizer.lr=1e-4", "-m", "--cfg", "job", "hydra.run.dir=/tmp/x", "+extra=_target_"]


def test_code_overrides_are_found_and_plain_ones_left_alone(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    assert code_overrides(CODE + PLAIN) == CODE
    message = refusal(["experiment=smoke", "reward._target_=my.Reward"])
    assert message and "'reward._target_=my.Reward'" in message and f"{ENV}=1" in message and "Fix" in message
    assert refusal(PLAIN) is None
    monkeypatch.setenv(ENV, "1")
    assert refusal(CODE) is None


@pytest.mark.parametrize("plan", [[], ["--plan"]], ids=["run", "plan"])
def test_a_callback_override_is_refused_before_it_runs(tmp_path, plan):
    source, target = tmp_path / "secret.txt", tmp_path / "copied.txt"
    source.write_text("x")
    env = {k: v for k, v in os.environ.items() if k != ENV}
    proc = subprocess.run(
        [
            *rewardflow_cmd(),
            *plan,
            "experiment=smoke",
            "+hydra.callbacks.x._target_=shutil.copyfile",
            f"+hydra.callbacks.x._args_=[{source},{target}]",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "chooses code to run" in proc.stderr and ENV in proc.stderr
    assert not target.exists() and not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "args,named",
    [
        (["trainer.steps=[1"], "'trainer.steps=[1' cannot be parsed"),
        (["~model"], "removes the model group, which every run needs"),
        (["method=dance_grpo,flow_grpo"], "add -m"),
        (["trainer.seed=0,1"], "rewardflow -m trainer.seed=0,1"),
    ],
)
def test_grammar_and_group_misuse_name_the_override_and_the_fix(args, named):
    problem = grammar_problem(["experiment=smoke", *args])
    assert problem and named in problem and "Fix" in problem


@pytest.mark.parametrize(
    "args",
    [
        ["-m", "trainer.seed=0,1"],
        ["cluster=local_multi", "trainer.seed=0,1"],
        ["~experiment"],
        ["model=[a,b]"],
        [],
        ["~reward@eval.rewards.diversity"],  # drops the demo's held-out diversity, not the reward group
    ],
)
def test_sweeps_with_multirun_lists_and_optional_groups_are_fine(args):
    assert grammar_problem(["experiment=smoke", *args]) is None


@pytest.mark.parametrize(
    "arg,named",
    [("trainer.steps=[1", "cannot be parsed"), ("trainer.steps=${oops}", "trainer.steps: Interpolation key 'oops'")],
)
def test_the_cli_reports_them_with_exit_2_and_one_line(arg, named, tmp_path):
    proc = subprocess.run(
        [*rewardflow_cmd(), "experiment=smoke", arg, f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert named in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
