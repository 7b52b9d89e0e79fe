"""A virtual environment holding what the GPU machine's Python holds (requirements/gpu-machine.txt) and nothing else,
built from this machine's CPython 3.11 for the GPU check's rehearsal (tests/test_gpu_check.py).

Each listed package is, in this order of preference:

* **installed** at the GPU machine's version when that differs from this environment's: its CPython 3.11 wheel
  (or pure-Python wheel) downloaded once into ``.rewardflow_cache/gpu_rehearsal/`` (git-ignored) and installed
  without an index;
* **linked** from this environment (the project's ``.venv``) when the version is the same, or the list gives no
  version, or the package is one of :data:`LINKED_DESPITE_VERSION` (the deviations, each with its reason): its
  top-level folders and files are symlinked into the new ``site-packages``, which costs no copy and no download;
* **left out** when this environment does not have it: the check never imported it here, so it cannot need it
  (and if it did, the rehearsal would fail, which is its purpose).

Packages this environment has and the list does not (diffusers, hydra-core, wandb, ...) are not there: they must
come from the ``.whl/`` set, exactly as on the GPU machine.
"""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
import sysconfig
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MACHINE_LIST = ROOT / "requirements" / "gpu-machine.txt"
DOWNLOADS = ROOT / ".rewardflow_cache" / "gpu_rehearsal" / f"py{sys.version_info.major}{sys.version_info.minor}"

# Linked at this environment's version although the GPU machine has another one, and why.
LINKED_DESPITE_VERSION = {
    "torch": "this machine's torch, linked: the GPU machine's build is a CUDA 13 wheel for CPython 3.12, and "
    "installing any torch here downloads gigabytes",
    "torchvision": "must match the linked torch",
    "triton": "must match the linked torch",
    "numpy": "numpy 2.5 publishes no wheels for CPython 3.11",
}


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def machine_packages(path: Path = MACHINE_LIST) -> dict[str, str | None]:
    """Normalised name -> the version the GPU machine has (None where only the name is known)."""
    packages: dict[str, str | None] = {}
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            packages[normalize(name)] = version or None
    return packages


@dataclass
class Rehearsal:
    """What went into the environment: name -> version, and the deviations from the GPU machine with reasons."""

    python: Path
    linked: dict[str, str] = field(default_factory=dict)
    installed: dict[str, str] = field(default_factory=dict)
    deviations: dict[str, str] = field(default_factory=dict)


def _top_levels(dist: importlib.metadata.Distribution) -> set[tuple[str, ...]]:
    """The first path components of a distribution's files (package folders, modules, its .dist-info)."""
    parts = {Path(str(f)).parts for f in dist.files or ()}
    return {p[:2] for p in parts if p and p[0] != ".."}


def _link(dist: importlib.metadata.Distribution, site: Path, shared_tops: set[str]) -> None:
    """Symlink ``dist``'s top-level entries into ``site``; inside a folder several distributions share (namespace
    packages such as ``nvidia/``), its own second-level entries."""
    source = Path(str(dist.locate_file("")))
    for parts in _top_levels(dist):
        top = parts[0]
        if top not in shared_tops:
            target = site / top
            if not target.exists():
                target.symlink_to(source / top)
            continue
        if len(parts) < 2 or parts[1] == "__pycache__":
            continue
        (site / top).mkdir(exist_ok=True)
        target = site / top / parts[1]
        if not target.exists() and not target.is_symlink():
            target.symlink_to(source / top / parts[1])


def _wheel_in(folder: Path, name: str, version: str) -> Path | None:
    stem = normalize(name).replace("-", "_")
    for f in folder.glob("*.whl"):
        dist, ver = f.name.split("-")[:2]
        if normalize(dist).replace("-", "_") == stem and ver == version:
            return f
    return None


def build(dest: Path) -> Rehearsal:
    """The environment in ``dest`` (a new venv without pip of its own: pip is on the GPU machine's list, so it is
    linked like the rest)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(dest)], check=True)
    python = dest / "bin" / "python3"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    here = {
        normalize(d.metadata["Name"]): d
        for d in importlib.metadata.distributions(path=[sysconfig.get_paths()["purelib"]])
    }
    claims = Counter(parts[0] for d in here.values() for parts in {p[:1] for p in _top_levels(d)})
    shared_tops = {top for top, n in claims.items() if n > 1}

    out = Rehearsal(python)
    to_install: dict[str, str] = {}
    for name, version in machine_packages().items():
        dist = here.get(name)
        if dist is None:
            continue
        if version is None or version == dist.version or name in LINKED_DESPITE_VERSION:
            _link(dist, site, shared_tops)
            out.linked[name] = dist.version
            if version is not None and version != dist.version:
                out.deviations[name] = f"{dist.version} instead of {version}: {LINKED_DESPITE_VERSION[name]}"
        else:
            to_install[name] = version
    if to_install:
        DOWNLOADS.mkdir(parents=True, exist_ok=True)
        missing = [f"{n}=={v}" for n, v in to_install.items() if _wheel_in(DOWNLOADS, n, v) is None]
        if missing:
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "-q",
                    "--no-deps",
                    "--only-binary=:all:",
                    "-d",
                    str(DOWNLOADS),
                    *missing,
                ],
                check=True,
            )
        subprocess.run(
            [
                str(python),
                "-m",
                "pip",
                "install",
                "-q",
                "--no-index",
                "--no-deps",
                "--no-compile",
                *(str(_wheel_in(DOWNLOADS, n, v)) for n, v in to_install.items()),
            ],
            check=True,
        )
        out.installed.update(to_install)
    return out
