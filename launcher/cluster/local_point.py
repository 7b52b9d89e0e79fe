"""One point of a ``cluster=local`` sweep in its own process: ``python -m launcher.cluster.local_point <payload>``.

The local sweep launcher (launcher/cluster/local_sweep.py) writes the point's payload (Hydra's context, the task
function, the point's composed config and Hydra's singletons, pickled with cloudpickle as hydra-submitit-launcher
does for its jobs) and starts this module on it. It runs the point as Hydra's own launchers do (``run_job``: the
run dir, its ``.hydra/`` files, the job's logging, the callbacks) and writes the ``JobReturn`` next to the payload.
A point that ends through ``sys.exit`` (a config error, a stop by a signal after its checkpoint) writes none: its
exit code tells the launcher. Its own process means its own signal handlers (a cancelled point checkpoints and stops
while the others go on: docs/resume.md#signals) and its own torch threads.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def result_path(payload: Path) -> Path:
    return payload.with_suffix(".result")


def main(payload_file: str) -> None:
    import cloudpickle
    from hydra.core.singleton import Singleton
    from hydra.core.utils import JobStatus, run_job, setup_globals

    payload = Path(payload_file)
    with payload.open("rb") as fh:
        context = cloudpickle.load(fh)
    Singleton.set_state(context["singletons"])
    setup_globals()
    ret = run_job(
        hydra_context=context["hydra_context"],
        task_function=context["task_function"],
        config=context["config"],
        job_dir_key="hydra.sweep.dir",
        job_subdir_key="hydra.sweep.subdir",
    )
    if ret.status == JobStatus.FAILED:
        error = ret._return_value
        try:
            cloudpickle.dumps(error)
        except Exception:  # noqa: BLE001 - an exception that does not pickle travels as its text
            ret._return_value = RuntimeError(f"{type(error).__name__}: {error}")
    tmp = result_path(payload).with_suffix(".tmp")
    with tmp.open("wb") as fh:
        cloudpickle.dump(ret, fh)
    os.replace(tmp, result_path(payload))


if __name__ == "__main__":
    main(sys.argv[1])
