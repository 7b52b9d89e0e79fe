"""``cluster=slurm`` runs through rewardflow's Hydra launcher plugin (``hydra/launcher=rewardflow_slurm``,
launcher/cluster/slurm_launcher.py), and ``cluster.*`` is the one place SLURM values are set: a ``hydra.launcher.*``
value that contradicts it fails before anything is queued (issue 29, item 5; docs/clusters.md#slurm). None of these
needs a SLURM cluster."""

from __future__ import annotations

import json
import sys

import pytest
from hydra.core.utils import JobStatus
from omegaconf import OmegaConf

from conftest import CONF, compose
from test_bad_inputs import assert_reported, cli

TARGET = "hydra_plugins.rewardflow_launchers.slurm_launcher.SlurmSweepLauncher"


def hydra_config(*overrides: str):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    compose()  # registers the schemas and the launcher configs
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return hydra_compose(config_name="train", overrides=list(overrides), return_hydra_config=True)


def contradictions(*overrides: str) -> list[str]:
    from launcher.cluster.slurm_launcher import launcher_contradictions

    return launcher_contradictions(hydra_config("cluster=slurm", *overrides))


def bare_path(tmp_path) -> dict:
    """A PATH without SLURM's commands: a config that passes the contradiction check stops at the SLURM check."""
    bare = tmp_path / "bin"
    bare.mkdir()
    (bare / "python").symlink_to(sys.executable)
    return {"PATH": str(bare)}


def test_cluster_slurm_selects_the_plugin_and_every_value_comes_from_cluster():
    cfg = hydra_config("cluster=slurm", "cluster.partition=cpu", "cluster.gpus_per_node=0", "cluster.nodes=2")
    launcher = cfg.hydra.launcher
    assert launcher._target_ == TARGET
    assert (launcher.partition, launcher.nodes, launcher.gpus_per_node, launcher.tasks_per_node) == ("cpu", 2, None, 0)
    assert launcher.setup == ["export SLURM_KILL_BAD_EXIT=1"] and launcher.wait is True
    assert launcher.array_parallelism == 256 and launcher.name == "rewardflow"
    assert contradictions() == []


def test_the_launcher_group_option_composes_and_cfg_hydra_shows_it(tmp_path):
    proc = cli("--cfg", "hydra", "cluster=slurm", "hydra/launcher=rewardflow_slurm", "-p", "hydra.launcher")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert f"_target_: {TARGET}" in proc.stdout and "partition: ${cluster.partition}" in proc.stdout
    assert "wait: ${cluster.wait}" in proc.stdout


def test_a_hydra_launcher_value_that_contradicts_cluster_fails_before_anything_is_queued(tmp_path):
    from test_fast_config_errors import HEAVY, imported
    from test_fast_config_errors import cli as cli_importtime

    sweep = tmp_path / "s"
    args = ["cluster=slurm", "hydra.launcher.partition=gpu", "cluster.partition=cpu", f"hydra.sweep.dir={sweep}"]
    proc = cli_importtime(*args, cwd=tmp_path, importtime=True)
    assert_reported(
        proc,
        "hydra.launcher.partition=gpu contradicts cluster.partition=cpu: set cluster.partition (the one place "
        "rewardflow reads SLURM values)",
    )
    assert not imported(proc.stderr) & set(HEAVY), "the contradiction check imported torch or diffusers"
    assert "submitit" not in imported(proc.stderr)  # nothing was submitted (nor could be)
    assert not sweep.exists()


def test_the_same_value_in_both_places_is_accepted(tmp_path):
    assert contradictions("hydra.launcher.partition=gpu", "cluster.partition=gpu") == []
    assert contradictions("cluster.gpus_per_node=0", "hydra.launcher.gpus_per_node=null") == []  # 0: no flag
    proc = cli(  # past the contradiction check, to the SLURM one (no SLURM on this PATH)
        "cluster=slurm",
        "hydra.launcher.partition=gpu",
        "cluster.partition=gpu",
        f"hydra.sweep.dir={tmp_path / 's'}",
        env=bare_path(tmp_path),
    )
    assert_reported(proc, "not on this machine's PATH")
    assert "contradicts" not in proc.stderr


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["hydra.launcher.partition=gpu"], "hydra.launcher.partition=gpu contradicts cluster.partition=null"),
        (["hydra.launcher.gpus_per_node=4"], "hydra.launcher.gpus_per_node=4 contradicts cluster.gpus_per_node=8"),
        (["hydra.launcher.wait=false"], "hydra.launcher.wait=false contradicts cluster.wait=true"),
        (["hydra.launcher.timeout_min=5"], "set cluster.timeout_min"),
        (["hydra.launcher.mem_gb=12"], "hydra.launcher.mem_gb=12 contradicts cluster.mem_gb="),
        (["hydra.launcher.array_parallelism=2"], "set cluster.array_parallelism"),
        (["hydra.launcher.setup=[]"], "hydra.launcher.setup=[] contradicts cluster.setup="),
        (["hydra.launcher.exclude=node3"], "cluster.additional_parameters.exclude=node3"),
        (["hydra.launcher.stderr_to_stdout=true"], "hydra.launcher.stderr_to_stdout=true: rewardflow sets it"),
        (["hydra/launcher=submitit_slurm"], "is not rewardflow's SLURM launcher"),
    ],
)
def test_each_contradiction_names_both_keys_and_the_fix(overrides, message):
    found = contradictions(*overrides)
    assert len(found) == 1 and message in found[0], found


def test_every_contradiction_is_listed_at_once(tmp_path):
    proc = cli(
        "cluster=slurm",
        "hydra.launcher.partition=gpu",
        "hydra.launcher.account=a",
        "cluster.account=b",
        f"hydra.sweep.dir={tmp_path / 's'}",
    )
    assert_reported(
        proc, "hydra.launcher.partition=gpu contradicts", "hydra.launcher.account=a contradicts cluster.account=b"
    )


# ----------------------------------------------------------------------------------------------- the launcher
class FakeJob:
    def __init__(self, num: int, folder) -> None:
        self.job_id = f"77_{num}"
        self.paths = type("Paths", (), {"stdout": folder / f"{num}.out", "stderr": folder / f"{num}.err"})()

    def results(self):
        raise AssertionError("cluster.wait=false must not wait for a result")


def test_fire_and_forget_records_the_jobs_and_returns_completed_results(tmp_path, monkeypatch, capsys):
    from hydra_plugins.rewardflow_launchers.slurm_launcher import SlurmSweepLauncher

    cfg = hydra_config("cluster=slurm", "cluster.wait=false", f"hydra.sweep.dir={tmp_path}")
    params = OmegaConf.to_container(cfg.hydra.launcher, resolve=True)
    launcher = SlurmSweepLauncher(**{k: v for k, v in params.items() if k != "_target_"})
    assert launcher.wait is False and "wait" not in launcher.params  # submitit never sees it
    launcher.config = cfg
    monkeypatch.setattr(
        launcher, "submit", lambda overrides, idx: [FakeJob(idx + i, tmp_path) for i in range(len(overrides))]
    )
    returns = launcher.launch([["a=1"], ["a=2"]], initial_job_idx=3)
    assert [r.status for r in returns] == [JobStatus.COMPLETED] * 2 and returns[1].return_value is None
    assert returns[0].overrides == ["a=1"] and returns[1].working_dir == str(tmp_path / "4")
    recorded = json.loads((tmp_path / "slurm_jobs.json").read_text())
    assert [(j["num"], j["job_id"], j["overrides"]) for j in recorded] == [(3, "77_3", ["a=1"]), (4, "77_4", ["a=2"])]
    out = capsys.readouterr().out
    assert "submitted 2 SLURM job(s): 77_3, 77_4" in out and f"rewardflow-status {tmp_path}" in out
