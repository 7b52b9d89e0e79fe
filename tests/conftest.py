"""Shared fixtures: offline hub, a per-session tiny-twin cache, Hydra composition helpers."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"

os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", WANDB_SILENT="true",
                  HF_HUB_DISABLE_PROGRESS_BARS="1", TOKENIZERS_PARALLELISM="false")
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


def group_options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def compose(overrides: list[str] | None = None):
    """Compose conf/train.yaml exactly as the CLI does (schemas registered)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from launcher.config import register_configs

    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return hydra_compose(config_name="train", overrides=list(overrides or []))


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
