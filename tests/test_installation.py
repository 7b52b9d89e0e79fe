"""The installation guard (launcher/installation.py): rewardflow's generic top-level packages must come from one
installation, and Hydra finds the configs through the config package."""

from __future__ import annotations

import importlib.resources
import os
import subprocess
from pathlib import Path

import pytest

from conftest import CONF, ROOT, rewardflow_cmd
from launcher import installation


def make_package(folder: Path, name: str, init: bool = True) -> Path:
    (folder / name).mkdir(parents=True)
    if init:
        (folder / name / "__init__.py").write_text('"""not rewardflow\'s"""\n')
    return folder / name


def test_this_checkout_is_one_installation():
    assert installation.ROOT == ROOT
    assert installation.problem() is None


def test_configs_come_from_the_config_package():
    assert installation.config_path() == f"pkg://{installation.CONFIG_PACKAGE}"
    tree = importlib.resources.files(installation.CONFIG_PACKAGE)
    assert (tree / "train.yaml").read_text() == (CONF / "train.yaml").read_text()
    assert sorted(p.name for p in tree.iterdir() if p.is_dir() and p.name != "__pycache__") == sorted(
        p.name for p in CONF.iterdir() if p.is_dir() and p.name != "__pycache__"
    )


def test_a_package_shadowed_by_another_folder_is_named_with_both_paths(tmp_path, monkeypatch):
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    make_package(ours, "rf_probe_pkg")
    make_package(theirs, "rf_probe_pkg")
    monkeypatch.syspath_prepend(str(ours))
    assert installation.problem(root=ours, packages=("rf_probe_pkg",)) is None

    monkeypatch.syspath_prepend(str(theirs))  # now first on sys.path
    message = installation.problem(root=ours, packages=("rf_probe_pkg",))
    assert "`rf_probe_pkg`" in message
    assert str(theirs / "rf_probe_pkg" / "__init__.py") in message
    assert str(ours / "rf_probe_pkg" / "__init__.py") in message
    assert "Fix: remove that folder from PYTHONPATH" in message


def test_a_folder_without_init_taken_as_a_namespace_package_is_named(tmp_path, monkeypatch):
    # What an editable install meets when the working directory of `python -m launcher` has e.g. a models/ folder
    # of checkpoints: Python's path finder returns it as a namespace package before the editable finder is asked.
    make_package(tmp_path / "elsewhere", "rf_probe_ns", init=False)
    monkeypatch.syspath_prepend(str(tmp_path / "elsewhere"))
    message = installation.problem(root=tmp_path / "ours", packages=("rf_probe_ns",))
    assert f"the folder {tmp_path / 'elsewhere' / 'rf_probe_ns'} (no __init__.py" in message
    assert str(tmp_path / "ours" / "rf_probe_ns" / "__init__.py") in message


def test_a_missing_package_is_reported():
    message = installation.problem(root=ROOT, packages=("rf_probe_absent",))
    assert "`rf_probe_absent` is missing" in message and "Fix: reinstall" in message


@pytest.mark.parametrize("where", ["PYTHONPATH", "working directory"])
def test_the_command_stops_when_a_package_is_shadowed(where, tmp_path):
    """`rewardflow` (here `python -m launcher`, run outside the repository) stops before composing anything."""
    fake = make_package(tmp_path / "other_project", "methods") / "__init__.py"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if where == "PYTHONPATH":
        env["PYTHONPATH"] = str(tmp_path / "other_project")
        cwd = tmp_path
    else:
        cwd = tmp_path / "other_project"  # `python -m` puts the working directory first on sys.path
    proc = subprocess.run(
        [*rewardflow_cmd(), "--cfg", "job"], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""  # no config printed: it stopped first
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("rewardflow: the module `methods` is imported from ")
    assert str(fake) in proc.stderr and str(ROOT / "methods" / "__init__.py") in proc.stderr
    assert ("the current directory" in proc.stderr) == (where == "working directory")
    assert "Fix: " in proc.stderr
