"""Every bad input of issue 16 fails fast on the command line: a non-zero exit code, a message naming the key (and the
fix), no traceback, and for sweeps nothing started (docs/configuration.md#validation)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from conftest import ROOT, compose, processes_with_env, rewardflow_cmd, run_leaving_pipes
from launcher.validate import validate
from rewardflow.errors import ConfigError
from rewards.tiny_twins import tiny_reward_overrides

CONFIG_ERROR = 2  # the CLI's exit code for config errors (launcher/cli.py)


def cli(*args: str, env: dict | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*rewardflow_cmd(), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def assert_reported(proc: subprocess.CompletedProcess, *keys: str, code: int = CONFIG_ERROR) -> None:
    assert proc.returncode == code, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    for key in keys:
        assert key in proc.stderr, proc.stderr[-3000:]


@pytest.fixture
def prompt_files(tmp_path) -> dict[str, Path]:
    files = {"latin1": tmp_path / "latin1.txt", "binary": tmp_path / "binary.txt", "utf16": tmp_path / "utf16.txt"}
    files["latin1"].write_bytes("a red café\na blue sky\n".encode("latin-1"))
    files["binary"].write_bytes(bytes(range(256)) * 4)
    files["utf16"].write_text("a red square\na blue sky\n", encoding="utf-16")
    return files


# ------------------------------------------------------------------------------------------- single runs, CLI
@pytest.mark.parametrize(
    "args,keys,code",
    [
        (["optimizer.lr=nan"], ["optimizer.lr", "finite"], CONFIG_ERROR),
        (["+method.clip_rnage=0.1"], ["method.clip_rnage", "did you mean method.clip_range?"], CONFIG_ERROR),
        (
            ["+trainer.stpes=3", "+nonsense=1"],
            ["trainer.stpes", "trainer.steps?", "nonsense", "2 config errors"],
            CONFIG_ERROR,
        ),
        (["logger.mode=onlin"], ["logger.mode", "auto, online, offline"], 1),  # Hydra's composition error
        (["model.dtype=bf32"], ["model.dtype", "bfloat16, bf16"], 1),
    ],
    ids=["lr-nan", "plus-key-typo", "plus-keys", "logger-mode", "dtype"],
)
def test_a_bad_value_is_a_message_naming_the_key(args, keys, code, tmp_path):
    run_dir = tmp_path / "run"
    proc = cli(*args, f"hydra.run.dir={run_dir}")
    assert_reported(proc, *keys, code=code)
    assert not (run_dir / "metrics.jsonl").exists()


def test_prompt_files_that_are_not_text_name_data_path_and_data_encoding(prompt_files, tmp_path):
    proc = cli("data=file", f"data.path={prompt_files['latin1']}", f"hydra.run.dir={tmp_path / 'a'}")
    assert_reported(proc, "data.path", "not valid utf-8", "data.encoding=")
    proc = cli("data=file", f"data.path={prompt_files['binary']}", f"hydra.run.dir={tmp_path / 'b'}")
    assert_reported(proc, "data.path", "binary file")
    proc = cli(
        "data=file",
        f"data.path={prompt_files['utf16']}",
        "data.encoding=no-such-codec",
        f"hydra.run.dir={tmp_path / 'c'}",
    )
    assert_reported(proc, "data.encoding='no-such-codec'")


def test_data_encoding_reads_a_named_encoding(prompt_files, no_model_building):
    no_eval = "eval.every=0"  # every prompt trained on (data=file holds some out when it evaluates)
    assert validate(
        compose(["data=file", f"data.path={prompt_files['latin1']}", "data.encoding=latin-1", no_eval])
    ) == [
        "a red café",
        "a blue sky",
    ]
    assert validate(
        compose(
            ["data=file", f"data.path={prompt_files['utf16']}", "data.encoding=utf-16", "data.prompts=null", no_eval]
        )
    ) == ["a red square", "a blue sky"]


def test_a_nan_reward_weight_is_rejected_before_training(tiny_rewards, tmp_path):
    proc = cli(
        "reward=multi",
        *tiny_reward_overrides(tiny_rewards, "multi"),
        "reward.weights.hps=nan",
        f"hydra.run.dir={tmp_path / 'run'}",
    )
    assert_reported(proc, "reward.weights.hps", "finite")


def test_broken_reward_files_are_messages_on_the_command_line(tiny_rewards, tmp_path):
    """An unparsable open_clip config and a cut weights download: exit 2, both keys named, before any model."""
    arch, weights = tmp_path / "arch.json", tmp_path / "model"
    arch.write_text('{"embed_dim": 32,, "vision_cfg": {}}')
    shutil.copytree(tiny_rewards / "pickscore" / "model", weights)
    (weights / "model.safetensors").write_bytes(b"<html>rate limited</html>")
    proc = cli(
        "reward=multi",
        *tiny_reward_overrides(tiny_rewards, "multi"),
        f"reward.components.hps.arch={arch}",
        f"reward.components.pickscore.path={weights}",
        f"hydra.run.dir={tmp_path / 'run'}",
    )
    assert_reported(proc, "reward.components.hps.arch", "not valid JSON", "reward.components.pickscore.path")
    assert "not a safetensors file" in proc.stderr


def test_cfg_hydra_resolve_with_cluster_slurm_prints_the_resolved_folders(tmp_path):
    proc = cli("--cfg", "hydra", "--resolve", "cluster=slurm", f"output_root={tmp_path}", "cluster.nodes=3")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert f"submitit_folder: {tmp_path}/train/multiruns/" in proc.stdout and "nodes: 3" in proc.stdout


# ------------------------------------------------------------------------------------------------------ devices
@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="checks a machine without a GPU")
def test_devices_a_gpu_less_machine_refuses_cuda_and_real_families_and_lists_every_error(tmp_path):
    proc = cli("model.device=cuda", f"hydra.run.dir={tmp_path / 'a'}")
    assert_reported(proc, "model.device", "no CUDA GPU")
    # a real family on the CPU, and a model folder that does not exist: both named in one message
    proc = cli("model=flux", "model.path=/nonexistent/flux", f"hydra.run.dir={tmp_path / 'b'}")
    assert_reported(proc, "2 config errors", "model.allow_cpu", "model.path='/nonexistent/flux'", "model=tiny_flux")


def test_the_first_log_line_names_device_dtype_world_size_and_mesh(tmp_path):
    run_dir = tmp_path / "run"
    proc = cli(
        "experiment=smoke",
        "trainer.steps=1",
        "logger=none",
        "trainer.threads=1",
        "trainer.export=false",
        f"hydra.run.dir={run_dir}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    first = proc.stdout.splitlines()[0]
    assert "device cpu, dtype float32, world size 1, mesh none" in first and first.endswith(f"run dir {run_dir}")


# ------------------------------------------------------------------------------------------------------ sweeps
def test_a_local_sweep_with_a_bad_point_runs_nothing_and_names_every_bad_point(tmp_path):
    sweep = tmp_path / "sweep"
    marker = f"REWARDFLOW_TEST_MARK={uuid.uuid4().hex}"
    args = ("-m", "method.clip_range=-1,0.0001", "trainer.steps=1,0", "logger=none", f"hydra.sweep.dir={sweep}")
    env = {**os.environ, **dict([marker.split("=", 1)])}
    proc = run_leaving_pipes([*rewardflow_cmd(), *args], tmp_path, env)
    assert_reported(
        proc,
        "3 of 4 sweep points cannot run, so none was started",
        "point 0 (method.clip_range=-1 trainer.steps=1 logger=none)",
        "point 3 (method.clip_range=0.0001 trainer.steps=0",
        "method.clip_range: must be > 0",
        "trainer.steps: must be >= 1",
    )
    assert "point 2 " not in proc.stderr
    assert not sweep.exists()  # no job folder, not even the sweep's
    assert not processes_with_env(marker)  # the fork server started while the points were checked was stopped


def test_a_local_multi_sweep_with_a_bad_point_starts_no_rank(tmp_path):
    sweep = tmp_path / "sweep"
    proc = cli("cluster=local_multi", "trainer.seed=0,1", "+trainer.sed=1", "logger=none", f"hydra.sweep.dir={sweep}")
    assert_reported(proc, "2 of 2 sweep points", "trainer.sed", "did you mean trainer.seed?")
    assert not sweep.exists()


# ------------------------------------------------------------------------------------------------------- SLURM
def slurm_answers() -> bool:
    try:
        return subprocess.run(["sinfo", "--noheader"], capture_output=True, timeout=15).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def test_cluster_slurm_without_slurm_commands_says_so_before_queueing(tmp_path):
    bare = tmp_path / "bin"  # a PATH with python only: no sbatch / sinfo / srun
    bare.mkdir()
    (bare / "python").symlink_to(sys.executable)
    proc = cli("cluster=slurm", f"hydra.sweep.dir={tmp_path / 'sweep'}", env={"PATH": str(bare)})
    assert_reported(proc, "cluster=slurm", "not on this machine's PATH", "cluster=local_multi")
    assert not (tmp_path / "sweep").exists()


@pytest.mark.skipif(
    shutil.which("sinfo") is None or not Path("/etc/slurm/slurm.conf").is_file(),
    reason="needs SLURM's commands and a slurm.conf to point elsewhere",
)
def test_cluster_slurm_with_an_unreachable_controller_says_so_before_queueing(tmp_path):
    conf = tmp_path / "slurm.conf"  # the real configuration, with a controller port nobody listens on
    lines = Path("/etc/slurm/slurm.conf").read_text().splitlines()
    conf.write_text("\n".join(line for line in lines if not line.startswith("SlurmctldPort")) + "\nSlurmctldPort=1\n")
    proc = cli("cluster=slurm", f"hydra.sweep.dir={tmp_path / 'sweep'}", env={"SLURM_CONF": str(conf)})
    assert_reported(proc, "cluster=slurm", "controller", "scontrol ping")
    assert not (tmp_path / "sweep").exists()


@pytest.mark.skipif(not slurm_answers(), reason="needs a SLURM controller (scripts/slurm_cluster.sh up)")
def test_cluster_slurm_with_an_unknown_partition_or_a_bad_point_queues_nothing(tmp_path):
    before = squeue_and_sacct_ids()
    proc = cli("cluster=slurm", "cluster.partition=no_such_partition", f"hydra.sweep.dir={tmp_path / 'a'}")
    assert_reported(proc, "cluster.partition='no_such_partition'", "does not exist")
    proc = cli(
        "cluster=slurm",
        "cluster.gpus_per_node=0",
        "cluster.tasks_per_node=1",
        "method.clip_range=-1,0.0001",
        f"hydra.sweep.dir={tmp_path / 'b'}",
    )
    assert_reported(proc, "1 of 2 sweep points", "method.clip_range=-1", "method.clip_range: must be > 0")
    assert squeue_and_sacct_ids() == before
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def squeue_and_sacct_ids() -> set[str]:
    out = subprocess.run(["squeue", "--noheader", "--all", "--format=%i"], capture_output=True, text=True).stdout
    acct = subprocess.run(
        ["sacct", "--noheader", "--allusers", "--format=JobID", "--starttime=now-1hour"], capture_output=True, text=True
    ).stdout
    return set(out.split()) | set(acct.split())


def test_the_submit_host_check_leaves_device_checks_to_the_job(no_model_building):
    """A SLURM submit host usually has no GPU: model.device=cuda is checked on the job's node, not here."""
    cfg = compose(["model.device=cuda"])
    if shutil.which("nvidia-smi") is None:
        with pytest.raises(ConfigError, match="model.device"):
            validate(cfg)
    validate(cfg, on_this_host=False)
