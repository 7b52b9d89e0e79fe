"""Config errors come before torch is imported and leave no run folder (issue 29, item 4; launcher/run_check.py,
docs/configuration.md#validation)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conftest import rewardflow_cmd
from launcher import run_check

HEAVY = ("torch", "diffusers", "transformers")


def cli(*args: str, cwd: Path, importtime: bool = False) -> subprocess.CompletedProcess:
    cmd = rewardflow_cmd()
    if importtime:  # every module the process imports, one "import time: ... | <name>" line each, on stderr
        cmd = [cmd[0], "-X", "importtime", *cmd[1:]]
    return subprocess.run(
        [*cmd, *args], cwd=cwd, capture_output=True, text=True, timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1"}
    )


def imported(stderr: str) -> set[str]:
    return {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines() if line.startswith("import time:")}


@pytest.mark.parametrize(
    "args,key",
    [
        (["trainer.steps=0"], "trainer.steps: must be >= 1"),
        (["+method.clip_rnage=0.1"], "did you mean method.clip_range?"),
        (["optimizer.scheduler=warmup_cosine", "optimizer.warmup_steps=0"], "optimizer.warmup_steps"),
        (["trainer.ema_decay=1.5"], "trainer.ema_decay"),
        # the components' own rules: the check hooks of their config classes (methods/*_config.py, ...)
        (["method.clip_range=-1"], "method.clip_range: must be > 0"),
        (["method=flash_grpo", "method.sde_index_pool=[99]"], "method.sde_index_pool: indices must lie in"),
        (["method=jagg", "method.window=7", "method.remainder=error"], "method.window: W = 7"),
        (["method=jagg", "method.base=flow_grpo_fast", "method.window_range=[0,1,2]"], "method.window_range"),
        (["logger.tags=[" + "x" * 70 + "]"], "logger.tags: W&B takes tags of at most 64"),
        (["data.prompts=null", "data.path=missing.txt"], "data.path='missing.txt': no such file"),
        # the models' and rewards' rules on values and files (models/*_config.py, rewards/*_config.py) and eval's
        (["model.height=30", "model.lora_rank=0"], "model.height: must be a positive multiple of 4"),
        (["model=tiny_wan2.1", "model.num_frames=4"], "model.num_frames: must be 4k + 1"),
        (["data.prompts=[a cat]"], "reward=color needs every prompt"),
        (["reward=clip", "reward.path=/nonexistent/clip"], "reward.path"),
        (["eval.samples_per_prompt=0"], "eval.samples_per_prompt: must be >= 1"),
    ],
)
def test_a_config_error_imports_no_torch_and_leaves_no_folder(args, key, tmp_path):
    proc = cli(*args, cwd=tmp_path, importtime=True)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "rewardflow: config error:" in proc.stderr and key in proc.stderr, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert not imported(proc.stderr) & set(HEAVY), "the config error path imported torch or diffusers"
    assert "launcher.validate" in imported(proc.stderr)  # the check ran (not an earlier exit)
    assert list(tmp_path.iterdir()) == []  # no outputs/train/runs/<ts>/


def test_an_error_of_a_components_check_hook_removes_the_new_run_folder(tmp_path):
    # found by a check that still needs the component's code (the model family's checkpoint folder), in the trainer
    proc = cli(f"model.path={tmp_path / 'no_model'}", "logger=none", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "config error:" in proc.stderr and "no_model" in proc.stderr, proc.stderr[-3000:]
    assert list(tmp_path.iterdir()) == []


def test_an_existing_run_folder_is_kept_on_a_config_error(tmp_path):
    run_dir = tmp_path / "runs" / "mine"
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text("{}\n")
    proc = cli(f"model.path={tmp_path / 'no_model'}", "logger=none", f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert (run_dir / "metrics.jsonl").read_text() == "{}\n"
    assert "no_model" in (run_dir / "rewardflow.log").read_text()  # the message is kept in its log


def test_only_the_folders_this_run_created_are_removed(tmp_path):
    run_check.note_run_folder(str(tmp_path / "outputs" / "train" / "runs" / "ts"))
    (tmp_path / "outputs" / "train" / "runs" / "ts" / ".hydra").mkdir(parents=True)
    (tmp_path / "outputs" / "train" / "other").mkdir()  # another run's, made meanwhile
    run_check.remove_new_run_folder()
    assert not (tmp_path / "outputs" / "train" / "runs").exists()
    assert (tmp_path / "outputs" / "train" / "other").is_dir()
    run_check.remove_new_run_folder()  # once only: a second call removes nothing
    assert (tmp_path / "outputs" / "train" / "other").is_dir()
