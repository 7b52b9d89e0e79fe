"""The installation the ``rewardflow`` command runs from: where Hydra finds its configs, and a guard that rewardflow's
top-level packages all come from that installation.

rewardflow's code lives in top-level packages with generic names (:data:`PACKAGES`; the layout is part of the
public interface). Another distribution, or a folder on ``sys.path`` such as a research repository's ``models/``, can
hold a package with one of those names; Python imports whichever comes first, so rewardflow would fail far from the
cause or run someone else's code. :func:`guard` stops the command before anything imports them, naming the module,
both paths and the fix. Standard library only: the CLI calls it first.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import sys
from importlib import metadata
from pathlib import Path

DISTRIBUTION = "rewardflow"
PACKAGES = ("launcher", "methods", "models", "rewards", "rewardflow")
CONFIG_PACKAGE = "launcher.conf"  # the repository's conf/, shipped as this package (setup.py)
ROOT = Path(__file__).resolve().parents[1]  # the folder holding this installation's packages
SOURCE_CONFIGS = ROOT / "conf"  # conf/ of a source checkout


def config_path() -> str:
    """Hydra's primary config path: the config package when it is importable (a wheel or an editable install);
    otherwise a source checkout's ``conf/`` (a clone run without installing, or an editable install made before the
    package existed)."""
    if importlib.util.find_spec(CONFIG_PACKAGE) is None:
        return str(SOURCE_CONFIGS)
    return f"pkg://{CONFIG_PACKAGE}"


def guard() -> None:
    """Exit with a message (code 2) when the installation is not one piece; do nothing when it is."""
    message = problem()
    if message:
        print(f"rewardflow: {message}", file=sys.stderr)
        sys.exit(2)


def problem(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> str | None:
    """What is wrong with the installation at ``root``, or None: a package imported from another folder (shadowed),
    a package whose ``__init__.py`` is not the one pip installed (another distribution wrote over it), or no configs.
    """
    recorded = _recorded_hashes(root)
    for name in packages:
        message = _shadowed(name, root) or _overwritten(name, root, recorded.get(f"{name}/__init__.py"))
        if message:
            return message
    if config_path() == str(SOURCE_CONFIGS) and not (SOURCE_CONFIGS / "train.yaml").is_file():
        return (
            f"rewardflow's configs are missing: there is no package {CONFIG_PACKAGE} and no {SOURCE_CONFIGS}. "
            f"Fix: reinstall rewardflow (`pip install .` from a clone, or `pip install -e .` again for an "
            f"editable install)."
        )
    return None


def _shadowed(name: str, root: Path) -> str | None:
    expected = root / name / "__init__.py"
    spec = importlib.util.find_spec(name)  # does not import it (nor anything else)
    if spec is None:
        return (
            f"rewardflow's package `{name}` is missing (expected {expected}). "
            f"Fix: reinstall rewardflow (`pip install --force-reinstall --no-deps {DISTRIBUTION}`)."
        )
    folder: Path | None
    if spec.origin and spec.has_location:
        found = Path(spec.origin).resolve()
        if found == expected:
            return None
        where, folder = str(found), found.parent.parent
    else:  # a folder without __init__.py on sys.path: Python takes it as a namespace package before an editable
        # install's finder is asked (e.g. a `models/` folder of checkpoints in the directory of `python -m launcher`)
        locations = [Path(p).resolve() for p in spec.submodule_search_locations or ()]
        where = f"the folder {locations[0]} (no __init__.py: a namespace package)" if locations else "nowhere"
        folder = locations[0].parent if locations else None
    owners = [d for d in _other_distributions(name) if _location(d) == folder]
    if owners:
        source = f"the distribution {' / '.join(owners)} (installed in {folder}), which has a package of that name,"
        fix = f"`pip uninstall {' '.join(owners)}`, or give rewardflow a virtual environment of its own"
    elif folder is not None and folder == Path.cwd().resolve():
        source = "the current directory"
        fix = "run rewardflow from another directory, or rename that folder"
    else:
        source = f"the folder {folder} on sys.path (PYTHONPATH, a .pth file or the working directory)"
        fix = "remove that folder from PYTHONPATH (or sys.path), or give rewardflow a virtual environment of its own"
    return (
        f"the module `{name}` is imported from {where}, not from rewardflow's installation ({expected}): "
        f"{source} shadows rewardflow's `{name}`. Fix: {fix}."
    )


def _overwritten(name: str, root: Path, recorded: metadata.FileHash | None) -> str | None:
    path = root / name / "__init__.py"
    if recorded is None or _hash_of(path, recorded.mode) == recorded.value:
        return None
    others = _other_distributions(name)
    culprit = f"the distribution {' / '.join(others)}" if others else "another installation"
    uninstall = f"`pip uninstall {' '.join(others)}`, then " if others else ""
    return (
        f"rewardflow's module `{name}` ({path}) is not the file rewardflow installed: {culprit} installed a "
        f"package `{name}` into the same folder ({root}) and wrote over it. Fix: give rewardflow a virtual "
        f"environment of its own, or {uninstall}`pip install --force-reinstall --no-deps {DISTRIBUTION}`."
    )


def _recorded_hashes(root: Path) -> dict[str, metadata.FileHash]:
    """The hashes pip recorded for the files of the rewardflow installed at ``root`` (RECORD); empty for an editable
    install or a source checkout, whose packages pip did not copy."""
    for dist in metadata.distributions(name=DISTRIBUTION):
        if Path(str(dist.locate_file(""))).resolve() == root:  # a SimplePath: a pathlib.Path for files on disk
            return {file.as_posix(): file.hash for file in dist.files or () if file.hash is not None}
    return {}


def _hash_of(path: Path, mode: str) -> str | None:
    if not path.is_file():
        return None
    digest = hashlib.new(mode, path.read_bytes()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()  # RECORD's encoding (the wheel spec)


def _other_distributions(name: str) -> list[str]:
    """Installed distributions other than rewardflow that declare a top-level ``name`` (reads every distribution's
    metadata, ~0.2 s: only on the error path)."""
    return sorted(set(metadata.packages_distributions().get(name, ())) - {DISTRIBUTION})


def _location(distribution: str) -> Path:
    return Path(str(metadata.distribution(distribution).locate_file(""))).resolve()
