"""Shared fixtures: offline hub, a per-session tiny-twin cache, Hydra composition helpers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.config import compose  # noqa: F401 - tests compose through conftest

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"

# WANDB_MODE=offline: logger.mode=auto would log online for a developer who ran `wandb login`
os.environ.update(
    HF_HUB_OFFLINE="1",
    TRANSFORMERS_OFFLINE="1",
    WANDB_SILENT="true",
    WANDB_MODE="offline",
    HF_HUB_DISABLE_PROGRESS_BARS="1",
    TOKENIZERS_PARALLELISM="false",
)
os.environ.pop("WANDB_API_KEY", None)


@pytest.fixture(scope="session", autouse=True)
def twin_cache(tmp_path_factory):
    """Tiny twins are built once per session into a fresh folder (subprocesses inherit the variable)."""
    cache = os.environ.get("REWARDFLOW_TEST_CACHE") or str(tmp_path_factory.mktemp("twins"))
    os.environ["REWARDFLOW_CACHE"] = cache
    return Path(cache)


@pytest.fixture(scope="session")
def tiny_rewards(twin_cache) -> Path:
    """Tiny random HPSv2.1 / PickScore / CLIP twins saved in their real formats (rewards/tiny_twins.py)."""
    from rewards.tiny_twins import materialize_tiny_rewards

    return materialize_tiny_rewards(twin_cache)


@pytest.fixture
def empty_hf_cache(monkeypatch, tmp_path):
    """Offline with an empty Hugging Face cache, whatever this machine holds."""
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf_cache"))
    return tmp_path / "hf_cache"


@pytest.fixture(scope="session")
def slurm_reference(tmp_path_factory, twin_cache) -> Path:
    """The uninterrupted 2-rank run that the SLURM tests' interrupted and multi-node jobs reproduce (tests/
    slurm_support.py); built once for test_slurm.py and test_slurm_multinode.py."""
    from slurm_support import reference_run

    return reference_run(tmp_path_factory.mktemp("reference"))


def group_options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def processes_with_env(marker: str) -> list[int]:
    """The pids of this machine's processes whose environment holds ``marker`` (a ``NAME=value`` a test gave a command):
    what the command left running after it exited, children and grandchildren alike. Not counted: a process already
    exiting (no command line left), and multiprocessing's resource tracker, which ends by itself once the processes
    that used it have (a moment after the command, on a loaded machine)."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if marker.encode() not in (proc / "environ").read_bytes().split(b"\0"):
                    continue
                cmdline = (proc / "cmdline").read_bytes()
            except OSError:
                continue  # ended meanwhile, or not ours to read
            if cmdline and b"resource_tracker" not in cmdline:
                found.append(int(proc.name))
    return found


def run_leaving_pipes(cmd: list[str], folder: Path, env: dict, timeout: int = 300) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, capture_output=True, text=True)``, except that the output goes through files in
    ``folder``: the call returns when the command exits, not when the last process holding its stdout does (a pipe's
    reader waits for every writer, so a process the command left behind would go unseen)."""
    out, err = folder / "cmd.stdout", folder / "cmd.stderr"
    with out.open("w") as o, err.open("w") as e:
        code = subprocess.run(cmd, cwd=ROOT, stdout=o, stderr=e, env=env, timeout=timeout).returncode
    return subprocess.CompletedProcess(cmd, code, out.read_text(), err.read_text())


def rewardflow_cmd() -> list[str]:
    return [sys.executable, "-m", "launcher"]


@pytest.fixture
def float64():
    """Default dtype float64 for the math tests (restored afterwards: other modules share the process)."""
    import torch

    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


def grad_error(grads: dict, reference: dict) -> float:
    """|g - g_ref| / |g_ref| over every parameter's gradient together (one tensor's small gradient would magnify
    rounding)."""
    assert grads.keys() == reference.keys() and reference
    diff = sum(float((grads[k] - g).square().sum()) for k, g in reference.items())
    return (diff / sum(float(g.square().sum()) for g in reference.values())) ** 0.5


@pytest.fixture
def no_model_building(monkeypatch):
    """Building any model option's backbone fails the test: config errors must come before that."""
    from hydra.utils import get_class

    from launcher.config import all_schemas

    def boom(self, *args, **kwargs):
        raise AssertionError(f"{type(self).__name__} was built before the config was validated")

    for schema in all_schemas()["model"].values():
        for cls in get_class(schema._target_).__mro__[:-1]:  # all but object
            if "__init__" in vars(cls):
                monkeypatch.setattr(cls, "__init__", boom)
