"""W&B as its users expect (issue 16): ``logger.mode=auto`` follows WANDB_MODE, a mode saved by ``wandb offline``,
and credentials configured in any usual way; WANDB_PROJECT is honoured; the start line says where the run goes.

Each case runs in a fresh process with its own HOME (W&B reads its settings once per process). Nothing contacts a
W&B server: online starts are only resolved, and the one that is attempted goes to a closed local port."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT
from rewardflow.errors import ConfigError

KEY = "a" * 40  # the format of a W&B API key

RESOLVE = (
    "import json; from launcher.tracking.wandb_logger import resolve_mode; print(json.dumps(resolve_mode('auto')))"
)


def clean_env(home, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_") and k != "NETRC"}
    return {**env, "HOME": str(home), "WANDB_SILENT": "true", **extra}


def run_python(code, home, **extra):
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=home,
        env=clean_env(home, **extra),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def resolved(home, **extra):
    return tuple(json.loads(run_python(RESOLVE, home, **extra).stdout.strip().splitlines()[-1]))


def write_netrc(home, machine):
    (home / ".netrc").write_text(f"machine {machine}\n  login user\n  password {KEY}\n")
    (home / ".netrc").chmod(0o600)


def write_settings(home, **values):
    folder = home / ".config" / "wandb"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "settings").write_text("[default]\n" + "".join(f"{k} = {v}\n" for k, v in values.items()))


@pytest.mark.parametrize(
    "case",
    [
        "nothing",
        "api key",
        "wandb login (netrc)",
        "settings file api_key",
        "WANDB_MODE beats credentials",
        "wandb offline beats credentials",
    ],
)
def test_auto_mode_follows_the_usual_wandb_setup(case, tmp_path):
    env = {}
    if case == "api key":
        env["WANDB_API_KEY"] = KEY
    elif case == "wandb login (netrc)":
        write_netrc(tmp_path, "api.wandb.ai")
    elif case == "settings file api_key":
        write_settings(tmp_path, api_key=KEY)
    elif case == "WANDB_MODE beats credentials":
        env.update(WANDB_API_KEY=KEY, WANDB_MODE="disabled")
    elif case == "wandb offline beats credentials":
        write_netrc(tmp_path, "api.wandb.ai")
        write_settings(tmp_path, mode="offline")
    mode, why = resolved(tmp_path, **env)
    expected = {
        "nothing": "offline",
        "WANDB_MODE beats credentials": "disabled",
        "wandb offline beats credentials": "offline",
    }.get(case, "online")
    assert mode == expected, why
    if case == "nothing":
        assert "WANDB_API_KEY" in why and "wandb login" in why  # how to log online
    if case == "wandb login (netrc)":
        assert "netrc" in why


def test_an_explicit_mode_wins_and_a_bad_one_names_the_key():
    from launcher.tracking.wandb_logger import resolve_mode

    assert resolve_mode("offline")[0] == "offline"
    with pytest.raises(ConfigError, match="logger.mode must be one of auto, online, offline, disabled"):
        resolve_mode("onlin")


START = textwrap.dedent("""
    import logging, sys
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(message)s")
    from launcher.tracking.wandb_logger import WandbLogger
    from launcher.tracking.wandb_logger_config import WandbLoggerConfig
    w = WandbLogger(WandbLoggerConfig(), run_dir=sys.argv[1], run_config={"x": 1})
    print("PROJECT", w.run.project, "MODE", w.mode)
    w.finish()
""")


@pytest.mark.parametrize("project", [None, "my-project"])
def test_wandb_project_is_honoured_and_the_offline_start_says_how_to_sync(project, tmp_path):
    env = {"WANDB_PROJECT": project} if project else {}
    proc = subprocess.run(
        [sys.executable, "-c", START, str(tmp_path / "run")],
        cwd=ROOT,
        env=clean_env(tmp_path, **env),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"PROJECT {project or 'rewardflow'} MODE offline" in proc.stdout
    assert "wandb sync " + str(tmp_path / "run" / "wandb" / "offline-run-") in proc.stdout


def test_an_online_start_that_fails_falls_back_to_offline(tmp_path):
    """Credentials found but the server unreachable (e.g. a compute node without internet): the run logs offline
    instead of failing. The 'server' is a closed local port."""
    proc = subprocess.run(
        [sys.executable, "-c", START, str(tmp_path / "run")],
        cwd=ROOT,
        env=clean_env(tmp_path, WANDB_API_KEY=KEY, WANDB_BASE_URL="http://127.0.0.1:9", WANDB_INIT_TIMEOUT="5"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "W&B online start failed" in proc.stdout and "MODE offline" in proc.stdout
