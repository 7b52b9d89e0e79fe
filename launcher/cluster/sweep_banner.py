"""Every sweep says where it is when it starts, and how to look at it when it ends.

A sweep's points write to ``<sweep dir>/<num>/``, but nothing told the user which sweep dir (a timestamp) a command
was filling, nor which commands follow and compare it. This Hydra callback (registered in conf/hydra/default.yaml,
for every launcher: cluster=local, local_multi, slurm) prints, at ``on_multirun_start``::

    rewardflow: sweep of 4 points (2 at a time) | sweep dir: outputs/train/multiruns/2026-12-05_10-00-00
      follow it: rewardflow-status outputs/train/multiruns/2026-12-05_10-00-00 --watch

and when the sweep ends (also when a point failed: Hydra then raises before ``on_multirun_end``, so the lines are
printed at exit), the exact ``rewardflow-status`` and ``rewardflow-compare`` commands (docs/clusters.md#following-a-sweep).

It also registers rewardflow's launchers (local sweeps, SLURM) with Hydra's plugin registry before Hydra instantiates
the sweeper (hydra_plugins/rewardflow_launchers/local_sweep_launcher.py says why).
"""

from __future__ import annotations

import atexit
import shlex
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig


def start_lines(sweep_dir: str, points: int | None, how: str) -> str:
    count = f"sweep of {points} point{'s' if points != 1 else ''}" if points is not None else "sweep"
    return (
        f"rewardflow: {count} ({how}) | sweep dir: {sweep_dir}\n"
        f"  follow it: rewardflow-status {shlex.quote(sweep_dir)} --watch"
    )


def end_lines(sweep_dir: str, submitted_only: bool) -> str:
    d = shlex.quote(sweep_dir)
    if submitted_only:
        return (
            f"rewardflow: sweep submitted | sweep dir: {sweep_dir}\n"
            f"  each point: rewardflow-status {d} --watch\n"
            f"  once they end, compare them: rewardflow-compare {d}"
        )
    return (
        f"rewardflow: sweep ended | sweep dir: {sweep_dir}\n"
        f"  each point: rewardflow-status {d}\n"
        f"  compare them: rewardflow-compare {d}"
    )


def _how(config: DictConfig) -> str:
    cluster = config.get("cluster", {})
    name = cluster.get("name", "local")
    if name == "local":
        return f"{int(cluster.get('parallel', 1))} at a time, cluster=local"
    return f"cluster={name}"


class SweepBanner(Callback):
    def __init__(self) -> None:
        self._end: str | None = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from hydra.core.plugins import Plugins

        from hydra_plugins.rewardflow_launchers.local_sweep_launcher import LocalSweepLauncher
        from hydra_plugins.rewardflow_launchers.slurm_launcher import SlurmSweepLauncher
        from launcher.cluster.sweep_check import sweep_points

        Plugins.instance().register(LocalSweepLauncher)
        Plugins.instance().register(SlurmSweepLauncher)
        sweep_dir = str(Path(str(config.hydra.sweep.dir)))
        points = sweep_points(config)
        print(start_lines(sweep_dir, len(points) if points is not None else None, _how(config)), flush=True)
        submitted_only = config.get("cluster", {}).get("name") == "slurm" and not config.cluster.get("wait", True)
        self._end = end_lines(sweep_dir, submitted_only)
        atexit.register(self._print_end)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._print_end()
        atexit.unregister(self._print_end)

    def _print_end(self) -> None:
        if self._end is not None:
            print(self._end, flush=True)
            self._end = None
