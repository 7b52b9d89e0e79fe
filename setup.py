"""Which files the rewardflow distribution ships; pyproject.toml holds everything else.

- Every Python package at the repository root (a folder with an ``__init__.py``; not ``tests`` or ``scripts``), found
  by setuptools' own discovery, so a new top-level package ships without an edit here.
- ``hydra_plugins.rewardflow_launchers``: Hydra instantiates launchers only from its ``hydra_plugins`` namespace
  package (no ``__init__.py``, shared with hydra-submitit-launcher), which setuptools' plain discovery skips.
- ``conf/``, Hydra's config tree, as the data package ``launcher.conf`` (``launcher/installation.py`` points Hydra
  at ``pkg://launcher.conf``). The repository keeps ``conf/`` at its root, where users read it; an installed
  rewardflow gets it inside its launcher rather than as a top-level ``conf`` package, a name many projects use.

This is a setup.py because pyproject.toml's ``[tool.setuptools]`` cannot combine package discovery
(``packages.find``) with a package mapped from another folder (``package-dir``): a found list replaces a given one.
"""

from setuptools import find_namespace_packages, find_packages, setup

CONFIG_PACKAGE = "launcher.conf"
config_packages = [CONFIG_PACKAGE] + [
    f"{CONFIG_PACKAGE}.{group}" for group in find_namespace_packages("conf", exclude=["*__pycache__*"])
]

setup(
    packages=find_packages(exclude=["tests", "tests.*", "scripts", "scripts.*", "conf", "conf.*"])
    + find_namespace_packages(include=["hydra_plugins.*"])
    + config_packages,
    package_dir={CONFIG_PACKAGE: "conf"},
    package_data={package: ["*.yaml"] for package in config_packages},
)
