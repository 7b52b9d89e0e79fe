"""`pip install` of a wheel (not editable) gives a working rewardflow: the wheel holds every package and conf/, and the
installed `rewardflow` composes and trains from a directory that is not the repository, importing only the wheel.

The fresh environment borrows the project's dependencies through a .pth line naming .venv's site-packages: a plain
path line does not run the .pth files in that folder, so the editable install's finder stays inactive there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest
import yaml

from conftest import CONF, ROOT

pytestmark = pytest.mark.slow

OUR_PACKAGES = sorted(
    p.parent.name for p in ROOT.glob("*/__init__.py") if p.parent.name not in ("conf", "tests", "scripts")
)
# Written into a folder on PYTHONPATH: at exit, the file of every module of ours the process imported.
MODULE_RECORDER = f"""
import atexit, json, os, sys

def _record():
    ours = {{name: getattr(module, "__file__", None) for name, module in list(sys.modules.items())
             if name.split(".")[0] in {OUR_PACKAGES!r}}}
    with open(os.environ["RF_IMPORTED_MODULES"], "w") as f:
        json.dump(ours, f)

atexit.register(_record)
"""


def pip(*args: str, cwd: Path | None = None) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )


def build_wheel(source: Path, out: Path) -> Path:
    pip("wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(out), str(source))
    (wheel,) = out.glob("*.whl")
    return wheel


def copy_of_the_repository(dest: Path) -> Path:
    """The files a clone would have, with uncommitted work (git's view: tracked and untracked, not ignored), so the
    build sees neither .venv nor a stale build/ folder."""
    listed = (
        subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            (dest / name).write_bytes((ROOT / name).read_bytes())
    return dest


def fresh_venv(folder: Path) -> Path:
    venv.EnvBuilder(with_pip=False, symlinks=True).create(folder)
    site = Path(
        subprocess.run(
            [folder / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}  # the project's .venv
    (site / "rewardflow_test_deps.pth").write_text("".join(f"{d}\n" for d in sorted(deps)))
    return site


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(wheel, venv folder, its site-packages): the wheel built from a copy of the repository, installed alone."""
    tmp = tmp_path_factory.mktemp("wheel")
    wheel = build_wheel(copy_of_the_repository(tmp / "src"), tmp / "dist")
    site = fresh_venv(tmp / "venv")
    pip("--python", str(tmp / "venv" / "bin" / "python"), "install", "--no-deps", "--no-index", str(wheel))
    return wheel, tmp / "venv", site


def run(venv_dir: Path, *args: str, cwd: Path, extra_env: dict | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PYTHONNOUSERSITE="1", **(extra_env or {}))
    return subprocess.run(
        [venv_dir / "bin" / "rewardflow", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def test_the_wheel_holds_every_package_and_the_configs(installed):
    wheel, _, _ = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    for package in OUR_PACKAGES:
        for source in (ROOT / package).rglob("*.py"):
            assert source.relative_to(ROOT).as_posix() in names
    configs = {p.relative_to(CONF).as_posix() for p in CONF.rglob("*") if p.suffix in (".yaml", ".py")}
    assert configs and {f"launcher/conf/{c}" for c in configs} <= names
    # Hydra's plugin namespace (no __init__.py of its own) holds our launcher classes (setup.py)
    plugins = {p.relative_to(ROOT).as_posix() for p in (ROOT / "hydra_plugins").rglob("*.py")}
    assert plugins and plugins <= names
    top_level = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top_level == set(OUR_PACKAGES) | {"hydra_plugins"}  # no top-level conf/, tests/ or scripts/


def test_the_installed_command_runs_outside_the_repository(installed, tmp_path):
    _, venv_dir, site = installed
    job = run(venv_dir, "--cfg", "job", cwd=tmp_path)
    assert job.returncode == 0, job.stderr
    assert yaml.safe_load(job.stdout)["method"]["name"] == "dance_grpo"

    help_ = run(venv_dir, "--help", cwd=tmp_path)
    assert help_.returncode == 0, help_.stderr
    for group in (p for p in CONF.iterdir() if p.is_dir() and p.name not in ("hydra", "__pycache__")):
        options = ", ".join(sorted(p.stem for p in group.glob("*.yaml")))
        assert f"\n{group.name}: {options}\n" in help_.stdout

    slurm = run(venv_dir, "cluster=slurm", "experiment=jagg_paper", "--cfg", "hydra", cwd=tmp_path)
    assert slurm.returncode == 0, slurm.stderr
    launcher = yaml.safe_load(slurm.stdout)["hydra"]["launcher"]
    assert launcher["_target_"] == "hydra_plugins.rewardflow_launchers.slurm_launcher.SlurmSweepLauncher"  # our plugin
    assert launcher["submitit_folder"].endswith(".submitit/%j")

    (tmp_path / "recorder").mkdir()
    (tmp_path / "recorder" / "sitecustomize.py").write_text(MODULE_RECORDER)
    imported = tmp_path / "imported.json"
    smoke = run(
        venv_dir,
        "experiment=smoke",
        "logger=none",
        "trainer.threads=1",
        cwd=tmp_path,
        extra_env={"PYTHONPATH": str(tmp_path / "recorder"), "RF_IMPORTED_MODULES": str(imported)},
    )
    assert smoke.returncode == 0, smoke.stderr[-3000:]
    (metrics,) = (tmp_path / "outputs" / "train" / "runs").glob("*/metrics.jsonl")
    assert len(metrics.read_text().splitlines()) == 3

    modules = json.loads(imported.read_text())
    for name in (
        "launcher.cli",
        "launcher.conf",
        "launcher.train.trainer",
        "methods.dance_grpo",
        "models.flux",
        "rewards.color",
    ):
        assert name in modules
    files = [Path(f).resolve() for f in modules.values() if f]
    assert all(f.is_relative_to(site.resolve()) for f in files), [f for f in files if not f.is_relative_to(site)]


def test_a_distribution_installed_over_rewardflow_is_named(installed, tmp_path):
    """pip lets a second distribution with a top-level `methods` write into rewardflow's folder; the command then
    stops, naming that distribution. (Runs last: it damages the environment.)"""
    _, venv_dir, site = installed
    other = tmp_path / "other"
    (other / "methods").mkdir(parents=True)
    (other / "methods" / "__init__.py").write_text('"""another project\'s methods"""\n')
    (other / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = '
        '"setuptools.build_meta"\n[project]\nname = "other-methods"\n'
        'version = "1.0"\n[tool.setuptools]\npackages = ["methods"]\n'
    )
    pip(
        "--python",
        str(venv_dir / "bin" / "python"),
        "install",
        "--no-deps",
        "--no-index",
        str(build_wheel(other, tmp_path / "dist")),
    )
    proc = run(venv_dir, "--help", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    assert f"rewardflow's module `methods` ({site.resolve() / 'methods' / '__init__.py'})" in proc.stderr
    assert "the distribution other-methods installed a package `methods`" in proc.stderr
    assert "Fix: " in proc.stderr and "pip uninstall other-methods" in proc.stderr
