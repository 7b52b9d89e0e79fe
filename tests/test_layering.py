"""The layering of rewardflow's packages (docs/development.md#layers-and-rooms), checked on every module's imports,
lazy imports inside functions and ``importlib.import_module("...")`` calls included.

Between packages: rewardflow is the ground everything may import; models stand on it; rewards and methods may import
models; the launcher may import everything. Inside the launcher, each room (subpackage) may import only the rooms and
top-level modules listed below; the top-level modules (the entry point, the root config, validation) may import any
room.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("rewardflow", "models", "rewards", "methods", "launcher")

#: package -> the other packages of ours it may import
MAY_IMPORT = {
    "rewardflow": set(),
    "models": {"rewardflow"},
    "rewards": {"rewardflow", "models"},
    "methods": {"rewardflow", "models"},
    "launcher": {"rewardflow", "models", "rewards", "methods"},
}

#: launcher room -> the other parts of the launcher it may import (a room, or a top-level module)
ROOM_MAY_IMPORT = {
    "checkpoint": set(),
    "tracking": set(),
    "plan": {"launcher.config", "launcher.installation"},  # composing a command line for --plan
    # the sweep check validates every point and checks that its run dir holds no other run
    # ... and sizes a SLURM job's memory and signal delay from the plan (launcher/cluster/cluster_defaults.py)
    # ... and checks the objective a tuning sweeper reads (launcher/tracking/objective.py)
    "cluster": {
        "launcher.validate",
        "launcher.run_dir_check",
        "launcher.checkpoint",
        "launcher.plan",
        "launcher.tracking",
    },
    "compare": {"launcher.tracking"},  # the offline W&B reader
    "train": {
        "launcher.checkpoint",
        "launcher.cluster",
        "launcher.plan",
        "launcher.tracking",
        "launcher.components",
        "launcher.validate",
    },
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports anywhere in its body (``from a import b`` counts as ``a.b``, which may name a
    module or an attribute; both are checked by their prefix)."""
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    return imports_in(path.read_text(), package)


def imports_in(source: str, package: str) -> set[str]:
    """The modules ``source`` (a module of ``package``) imports, at module level or inside functions."""
    tree = ast.parse(source)
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolved against this module's package
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            out.update(f"{module}.{alias.name}" for alias in node.names)
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            out.add(node.args[0].value)
    return out


def _modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _room(module: str) -> str | None:
    """The launcher room of ``launcher.<room>.<...>``; None for a top-level module of the launcher."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 and (ROOT / "launcher" / parts[1]).is_dir() else None


@pytest.mark.parametrize("package", PACKAGES)
def test_packages_import_only_the_layers_below(package):
    files = _modules(package)
    assert files, package
    wrong = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in files
        for name in sorted(imported_modules(path))
        if (top := name.split(".")[0]) in PACKAGES and top != package and top not in MAY_IMPORT[package]
    ]
    assert not wrong, "\n".join(wrong)


def test_launcher_rooms_import_only_what_their_docstring_allows():
    rooms = {p.name for p in (ROOT / "launcher").iterdir() if (p / "__init__.py").is_file()}
    assert rooms == set(ROOM_MAY_IMPORT), "every launcher room needs its row in ROOM_MAY_IMPORT"
    wrong = []
    for path in _modules("launcher"):
        room = _room(_module_name(path)) or (path.parent.name if path.parent.name in rooms else None)
        if room is None:
            continue  # top-level modules may import any room
        own = f"launcher.{room}"
        for name in sorted(imported_modules(path)):
            if not name.startswith("launcher.") or name == own or name.startswith(own + "."):
                continue
            if not any(name == ok or name.startswith(ok + ".") for ok in ROOM_MAY_IMPORT[room]):
                wrong.append(f"{path.relative_to(ROOT)} ({room}) imports {name}")
    assert not wrong, "\n".join(wrong)


def test_rooms_say_what_they_own_and_may_import():
    for init in sorted((ROOT / "launcher").glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert "import" in doc and len(doc) > 200, f"{init.relative_to(ROOT)}: say what the room owns and imports"


def test_the_checker_sees_lazy_and_relative_imports():
    source = (
        "import torch\n"
        "def f():\n"
        "    from rewards.color import COLOURS\n"
        "    from .sibling import thing\n"
        "    import importlib\n"
        "    return importlib.import_module('launcher.cli')\n"
    )
    found = imports_in(source, "models")
    assert {"torch", "rewards.color.COLOURS", "models.sibling.thing", "launcher.cli"} <= found
