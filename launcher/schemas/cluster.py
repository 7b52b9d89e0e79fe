"""Schemas of the cluster group."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class LocalClusterConfig:
    name: str = "local"               # in-process, one process


SCHEMAS = {"cluster": {"local": LocalClusterConfig}}
