"""The command line as a user meets it (issue 16): help and completion show the groups users compose, job and log
names say rewardflow, error texts use the option names users type, unwritable run folders and bad endings give a
message instead of a traceback, quiet runs log a line per step, long prompts warn once."""

from __future__ import annotations

import logging
import os
import re
import subprocess

import pytest
from omegaconf import OmegaConf

from conftest import CONF, ROOT, compose, group_options, rewardflow_cmd

QUICK = ["experiment=smoke", "logger=none", "trainer.threads=1"]


def cli(*args, env=None, timeout=300):
    return subprocess.run(
        [*rewardflow_cmd(), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def test_help_names_rewardflow_and_lists_only_the_groups_users_compose():
    proc = cli("--help")
    assert proc.returncode == 0
    assert proc.stdout.startswith("rewardflow: ") and "cli is powered" not in proc.stdout
    for group in ("method", "model", "reward", "data", "cluster", "logger", "experiment"):
        assert f"\n{group}: {', '.join(group_options(group))}\n" in proc.stdout
    assert "schema/" not in proc.stdout


@pytest.mark.parametrize("line", ["rewardflow ", "rewardflow s", "rewardflow +s", "rewardflow meth"])
def test_shell_completion_hides_the_schema_groups(line):
    proc = cli("-sc", "query=bash", env={"COMP_LINE": line})
    assert proc.returncode == 0
    words = proc.stdout.split()
    assert not [w for w in words if "schema" in w], words
    if line == "rewardflow meth":
        assert "method=" in words
    if line == "rewardflow ":
        assert {"method=", "reward=", "trainer."} <= set(words)


def test_slurm_jobs_and_run_logs_are_named_rewardflow():
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    compose()  # registers the schemas
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = hydra_compose(config_name="train", overrides=["cluster=slurm"], return_hydra_config=True)
    assert cfg.hydra.job.name == "rewardflow" and OmegaConf.select(cfg, "hydra.launcher.name") == "rewardflow"
    log_file = OmegaConf.to_container(cfg.hydra.job_logging, resolve=False)["handlers"]["file"]["filename"]
    assert log_file.endswith("/${hydra.job.name}.log")  # <run dir>/rewardflow.log


@pytest.mark.parametrize("group", ["method", "model", "reward", "data"])
def test_components_are_named_by_the_option_users_type(group):
    """Messages say `reward=<name>`: every option's name is its file name (`reward=jpeg`, not jpeg_compressibility)."""
    for option in group_options(group):
        assert compose([f"{group}={option}"])[group].name == option


def _unwritable_folder(tmp_path):
    """A folder nobody may create entries in, root included (root ignores permission bits, not sysfs)."""
    if os.geteuid() == 0:
        return "/sys/rewardflow-unwritable-test"
    folder = tmp_path / "read_only"
    folder.mkdir()
    folder.chmod(0o555)
    return str(folder / "run")


@pytest.mark.parametrize("case", ["output_root is a file", "hydra.run.dir unwritable", "hydra.sweep.dir unwritable"])
def test_an_unwritable_run_folder_is_a_message_and_nothing_is_created(case, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    if case == "output_root is a file":
        args, key = [f"output_root={blocker / 'out'}"], "output_root="
    elif case == "hydra.run.dir unwritable":
        args, key = [f"hydra.run.dir={_unwritable_folder(tmp_path)}"], "hydra.run.dir="
    else:
        args, key = ["-m", f"hydra.sweep.dir={_unwritable_folder(tmp_path)}"], "hydra.sweep.dir="
    proc = cli(*args[:-1], *QUICK, args[-1])  # -m goes before the overrides
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert key in proc.stderr and "cannot write" in proc.stderr and "Traceback" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) in (["a_file"], ["a_file", "read_only"])
    if os.path.isdir(tmp_path / "read_only"):
        assert not os.listdir(tmp_path / "read_only")


def test_long_prompts_warn_once_with_the_count_of_truncated_prompts(tmp_path, caplog):
    from launcher.train.trainer import RunInfo, Trainer

    long_prompt = ("a red square " * 800)[:10_000]
    cfg = compose([*QUICK, f"data.prompts=['{long_prompt}','a blue square','a green square']"])
    with caplog.at_level(logging.WARNING):
        trainer = Trainer(cfg, RunInfo(run_dir=tmp_path))
        trainer.train_step(0)
    # ours only: diffusers' own per-call truncation notices show up here when its logging propagates
    warnings = [r.getMessage() for r in caplog.records if r.name == "launcher.train.trainer" and "truncated" in r.msg]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("model=tiny_flux:") and "1 of 3 prompts are cut" in warnings[0]
    assert "model.max_sequence_length=16" in warnings[0] and "CLIP (77 tokens)" in warnings[0]


@pytest.mark.slow
def test_a_quiet_run_logs_a_line_per_step_and_a_nan_last_reward_ends_cleanly(tmp_path):
    """Not a terminal (as on SLURM): no progress bar but a plain line per step, in the console and the run log; the
    run dir is printed first; a run whose last reward is NaN ends with exit code 0; DCP's single-process warning
    is not printed; the W&B start line says how to sync."""
    run_dir = tmp_path / "run"
    proc = cli(
        "experiment=smoke",
        "trainer.progress=true",
        "trainer.log_every=1",
        "trainer.threads=1",
        "trainer.max_nonfinite_in_a_row=5",
        "reward._target_=fault_rewards.NaNOnLastStep",
        f"hydra.run.dir={run_dir}",
        env={"PYTHONPATH": str(ROOT / "tests"), "REWARDFLOW_ALLOW_CODE_OVERRIDES": "1"},
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "assuming the intent" not in proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].endswith(f"run dir {run_dir}")
    steps = [m.group(1) for m in map(re.compile(r"\[rewardflow\]\[INFO\] - (step \d+ \(.*)").search, lines) if m]
    # the step index of metrics.jsonl and the checkpoints, and the count done (docs/metrics.md#step-numbering)
    assert [s.split(" | ")[0] for s in steps] == ["step 0 (1/3 done)", "step 1 (2/3 done)", "step 2 (3/3 done)"]
    assert "reward/mean nan" in steps[2] and "skipped updates 1" in steps[2]
    closing = [line for line in lines if f"run dir {run_dir}: " in line]  # what the run wrote (smoke draws no grids)
    assert closing and "metrics.jsonl" in closing[-1] and "samples/" not in closing[-1]
    assert not (run_dir / "samples").exists()
    assert any("wandb sync " in line for line in lines)
    log = (run_dir / "rewardflow.log").read_text()
    assert all(s in log for s in steps)
