"""What ``rewardflow --help`` and shell completion show of the config tree: the groups users compose, not the
internal ``schema/<group>`` groups the YAML options are built on (launcher.config registers those).

Hydra lists every group of its search path in both places and has no switch to hide one, so the help template
(conf/hydra/default.yaml) lists the groups through the ``rf_config_groups`` resolver, and :func:`completion_filter`
drops the schema entries from the words a completion query prints.
"""

from __future__ import annotations

import contextlib
import importlib.resources
import io
import sys
from pathlib import Path
from typing import Iterator

HIDDEN = ("schema", "hydra")  # hydra/* groups have their own page: --hydra-help


def _config_root():
    """The folder Hydra reads the configs from: the config package, or a source checkout's conf/."""
    from launcher import installation

    path = installation.config_path()
    if path.startswith("pkg://"):
        return importlib.resources.files(path[len("pkg://") :])
    return Path(path)


def group_options() -> dict[str, list[str]]:
    """Every config group users compose and its options, by name."""
    groups = {}
    for group in sorted(
        (p for p in _config_root().iterdir() if p.is_dir() and p.name not in HIDDEN), key=lambda p: p.name
    ):
        options = sorted(p.name[: -len(".yaml")] for p in group.iterdir() if p.name.endswith(".yaml"))
        if options:
            groups[group.name] = options
    return groups


def config_groups_text() -> str:
    """``group: option, option, ...`` per line for every config group folder (Hydra's help layout)."""
    return "\n".join(f"{group}: {', '.join(options)}" for group, options in group_options().items()) + "\n"


def _hidden(word: str) -> bool:
    return word.lstrip("+~").startswith("schema/")


@contextlib.contextmanager
def completion_filter(argv: list[str]) -> Iterator[None]:
    """Around Hydra's main: when it answers a shell-completion query (``-sc query=bash|zsh|fish``), print its
    answer without the ``schema/...`` entries. Anything else passes through untouched."""
    query = any(a in ("-sc", "--shell-completion") for a in argv) and any(a.startswith("query=") for a in argv)
    if not query:
        yield
        return
    captured = io.StringIO()
    try:
        with contextlib.redirect_stdout(captured):
            yield
    finally:
        text = captured.getvalue()
        separator = "\n" if "\n" in text.strip() else " "
        words = [w for w in text.split() if not _hidden(w)]
        sys.stdout.write(separator.join(words) + ("\n" if text.endswith("\n") else ""))
        sys.stdout.flush()
