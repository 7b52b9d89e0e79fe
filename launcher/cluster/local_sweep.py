"""The launcher of ``cluster=local`` sweeps: every point in its own process, ``cluster.parallel`` of them at a time.

Hydra's basic launcher runs a sweep's points one after the other inside the submitting process: nothing could run
two points side by side on a machine with cores to spare, a signal to one point stopped the whole sweep, and
nothing outside could tell which point was where. This launcher (selected by conf/cluster/local.yaml; the class
Hydra instantiates lives in the ``hydra_plugins`` namespace, hydra_plugins/rewardflow_launchers/, because Hydra only
instantiates launchers from there) runs each point in a process of its own (Hydra's ``run_job`` on the pickled
point, as hydra-submitit-launcher's local executor does: launcher/cluster/local_point.py), forked from a server that
imported torch and the trainer once (launcher/cluster/point_process.py), and:

- runs ``min(cluster.parallel, points)`` at a time; each point's automatic torch threads are the CPUs this process
  may use divided by that number (``REWARDFLOW_PARALLEL_POINTS``, read by launcher/cluster/device_check.py);
- records the points in ``<sweep dir>/local_jobs.json`` (launcher/cluster/local_jobs.py) for ``rewardflow-status``,
  and cancels the points that ``rewardflow-status --cancel`` asks for: a queued point is dropped, a running one gets
  SIGTERM (it checkpoints at the end of its step and stops; the same command resumes it: docs/resume.md#signals);
- on SIGTERM or Ctrl-C itself: starts no more points, passes one SIGTERM to each running point and waits for their
  checkpoints (a second signal is passed on too: the points stop at once);
- prints a line as each point ends, with the sweep's progress and time left; with points side by side, their
  output lines carry the point's number (``[1] ... step 9 (10/100 done) ...``).

A point that failed fails its ``JobReturn``: Hydra's sweeper reports it once the batch has ended. A point cancelled
on request is not a failure of the sweep (its return value is NaN); a sweep stopped as a whole exits with 143.
docs/clusters.md#local-sweeps.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, NoReturn, Sequence

from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict

from launcher.cluster import local_jobs as jobs
from launcher.cluster.point_process import PointProcess, preload_families, stop_server
from launcher.cluster.point_progress import duration, read_progress, sweep_remaining_s

log = logging.getLogger("rewardflow")

#: the environment variable that tells a point how many points share the machine's CPUs
PARALLEL_ENV = "REWARDFLOW_PARALLEL_POINTS"
POLL_S = 0.25
#: a sweep stopped by a signal or by ``rewardflow-status --cancel`` of all its points: 128 + SIGTERM, as a run
STOPPED_EXIT_CODE = 128 + signal.SIGTERM


#: set once a sweep's points have run here, each in its own process: the CLI then ends without the interpreter's
#: teardown (:func:`exit_without_teardown`)
ran_points = False


def exit_without_teardown(code: int = 0) -> NoReturn:
    """End the submitting process of a sweep whose points ran in their own processes: the exit handlers run (logging's
    shutdown, multiprocessing's), the streams are flushed, the fork server is stopped, and the interpreter's teardown
    of the thousands of modules that this process's sweep check and the server imported (torch, diffusers) is skipped:
    1.2-2 s each on 2 cores (issue 29), and a caller reading the sweep's output through a pipe waited for the server's
    too (it holds the same stdout). Nothing of a run lives in either process: each point wrote and closed its files."""
    import atexit

    atexit._run_exitfuncs()
    stop_server()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


class PointFailed(RuntimeError):
    """A point that ended without a result (its exit code and last message say why), or was cancelled."""


@dataclass
class Point:
    num: int
    overrides: list[str]
    config: DictConfig
    record: dict[str, Any]
    proc: PointProcess | None = None
    payload: Path | None = None
    started: float = 0.0
    signals: int = 0
    last_message: list[str] = field(default_factory=list)


class LocalSweepLauncher(Launcher):
    def __init__(self) -> None:
        super().__init__()
        self.config: DictConfig | None = None
        self.task_function: TaskFunction | None = None
        self.hydra_context: HydraContext | None = None
        self._stop_signals = 0

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function

    # -- the sweep --------------------------------------------------------------------------------------------------
    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        assert self.config is not None and self.hydra_context is not None
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        self.sweep_dir = Path(str(self.config.hydra.sweep.dir))
        (self.sweep_dir / ".local_points").mkdir(parents=True, exist_ok=True)
        (self.sweep_dir / jobs.CANCEL_FILE).unlink(missing_ok=True)  # a resumed sweep starts without old requests
        parallel = int(self.config.cluster.get("parallel", 1))
        self.concurrency = max(1, min(parallel, len(job_overrides)))
        points = [self._point(initial_job_idx + i, list(o)) for i, o in enumerate(job_overrides)]
        preload_families([m for p in points for m in family_modules(p.config)])
        known = jobs.read_jobs(self.sweep_dir)["points"] if (self.sweep_dir / jobs.JOBS_FILE).exists() else []
        nums = {p.num for p in points}
        self.record = {
            "launcher": {**jobs.process_record(os.getpid()), "parallel": self.concurrency},
            "points": [r for r in known if r["num"] not in nums] + [p.record for p in points],
        }
        self._save()
        log.info(f"Launching {len(points)} jobs locally, {self.concurrency} at a time")
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            results = self._run(points)
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        everything, _ = jobs.cancel_requests(self.sweep_dir)
        if self._stop_signals or everything:  # the whole sweep was stopped: a message and an exit code, no traceback
            cancelled = sum(p.record["state"] == jobs.CANCELLED for p in points)
            print(
                f"rewardflow: sweep stopped: {cancelled} point(s) cancelled (their last checkpoints are kept); run "
                f"the same command to resume them",
                file=sys.stderr,
                flush=True,
            )
            sys.exit(STOPPED_EXIT_CODE)
        global ran_points
        ran_points = True
        return [results[p.num] for p in points]

    def _point(self, num: int, overrides: list[str]) -> Point:
        assert self.config is not None and self.hydra_context is not None
        config = self.hydra_context.config_loader.load_sweep_config(self.config, overrides)
        with open_dict(config):
            config.hydra.job.id = num
            config.hydra.job.num = num
        record = {
            "num": num,
            "overrides": overrides,
            "run_dir": str(self.sweep_dir / str(config.hydra.sweep.subdir)),
            "steps": int(config.trainer.steps) if "trainer" in config else None,
            "state": jobs.QUEUED,
        }
        return Point(num, overrides, config, record)

    def _run(self, points: list[Point]) -> dict[int, JobReturn]:
        queued, running, results = list(points), list[Point](), dict[int, JobReturn]()
        self.ended: list[Point] = []
        while queued or running:
            everything, asked = jobs.cancel_requests(self.sweep_dir)
            stop = everything or self._stop_signals > 0
            for p in [p for p in queued if stop or p.num in asked]:
                queued.remove(p)
                results[p.num] = self._end(p, jobs.CANCELLED, "cancelled before it started")
            for p in running:
                wanted = max(self._stop_signals, 1 if (everything or p.num in asked) else 0)
                while p.signals < wanted and p.proc is not None and p.proc.poll() is None:
                    p.proc.send_signal(signal.SIGTERM)
                    p.signals += 1
            while queued and len(running) < self.concurrency:
                p = queued.pop(0)
                self._start(p)
                running.append(p)
            time.sleep(POLL_S)
            for p in [p for p in running if p.proc is not None and p.proc.poll() is not None]:
                running.remove(p)
                results[p.num] = self._collect(p, cancelled=p.signals > 0)
        return results

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._stop_signals += 1
        if self._stop_signals == 1:
            print(
                f"rewardflow: {signal.Signals(signum).name}: stopping the sweep; each running point writes a "
                f"checkpoint and stops (a second signal stops them at once). Resume: run the same command",
                file=sys.stderr,
                flush=True,
            )

    # -- one point ----------------------------------------------------------------------------------------------------
    def _start(self, p: Point) -> None:
        import cloudpickle
        from hydra.core.singleton import Singleton

        lst = " ".join(filter_overrides(p.overrides))
        log.info(f"\t#{p.num} : {lst}")
        p.payload = self.sweep_dir / ".local_points" / f"{p.num}.payload"
        p.payload.with_suffix(".result").unlink(missing_ok=True)
        with p.payload.open("wb") as fh:
            cloudpickle.dump(
                {
                    "hydra_context": self.hydra_context,
                    "task_function": self.task_function,
                    "config": p.config,
                    "singletons": Singleton.get_state(),
                },
                fh,
            )
        outputs = None
        if self.concurrency > 1:  # side by side: lines carry the point's number
            outputs = (p.payload.with_suffix(".stdout"), p.payload.with_suffix(".stderr"))
            for fifo, sink in zip(outputs, (sys.stdout, sys.stderr)):
                fifo.unlink(missing_ok=True)
                os.mkfifo(fifo)
                threading.Thread(target=_relay, args=(fifo, sink, p), daemon=True).start()
        p.proc = PointProcess(p.payload, {PARALLEL_ENV: str(self.concurrency)}, outputs)
        p.started = time.monotonic()
        p.record.update(state=jobs.RUNNING, **jobs.process_record(p.proc.pid), started=time.time())
        self._save()

    def _collect(self, p: Point, cancelled: bool) -> JobReturn:
        import cloudpickle

        assert p.proc is not None and p.payload is not None
        result = p.payload.with_suffix(".result")
        ret: JobReturn | None = None
        if result.exists():
            with result.open("rb") as fh:
                ret = cloudpickle.load(fh)
        took = duration(time.monotonic() - p.started)
        if ret is not None and ret.status == JobStatus.COMPLETED:
            self._end(p, jobs.DONE, f"in {took}", exit_code=p.proc.returncode)
            return ret
        if ret is not None:
            error = ret._return_value
            reason = f"{type(error).__name__}: {error}".splitlines()[0][:300]
        else:
            messages = [m for m in p.last_message if m.startswith("rewardflow:")] or p.last_message
            reason = (messages[-1] if messages else "")[:300] or f"exit code {p.proc.returncode}"
        if cancelled:
            reason = "stopped on request after a checkpoint of its last step; the sweep's command resumes it"
        failed = self._end(p, jobs.CANCELLED if cancelled else jobs.FAILED, reason, exit_code=p.proc.returncode)
        return ret if ret is not None and not cancelled else failed

    def _end(self, p: Point, state: str, reason: str, exit_code: int | None = None) -> JobReturn:
        p.record.update(state=state, reason=reason, exit_code=exit_code, ended=time.time())
        self._save()
        self.ended.append(p)
        print(f"rewardflow: point {p.num} {state} ({reason}) | {self._progress()}", flush=True)
        if state in (jobs.DONE, jobs.CANCELLED):  # a point cancelled on request is not the sweep's failure
            return JobReturn(status=JobStatus.COMPLETED, _return_value=float("nan"), overrides=p.overrides)
        how = f"point {p.num} ({' '.join(p.overrides) or 'defaults'}) failed: {reason}"
        return JobReturn(status=JobStatus.FAILED, _return_value=PointFailed(how), overrides=p.overrides)

    def _progress(self) -> str:
        points = self.record["points"]
        ended = [r for r in points if r["state"] in jobs.ENDED]
        counts = ", ".join(
            f"{sum(r['state'] == s for r in ended)} {s}"
            for s in (jobs.DONE, jobs.FAILED, jobs.CANCELLED)
            if any(r["state"] == s for r in ended)
        )
        unfinished = [read_progress(Path(r["run_dir"]), r.get("steps")) for r in points if r not in ended]
        eta = duration(sweep_remaining_s(unfinished, self.concurrency))
        return f"sweep: {len(ended)} of {len(points)} points ended ({counts}) | ETA {eta if unfinished else '0s'}"

    def _save(self) -> None:
        jobs.write_jobs(self.sweep_dir, self.record)


def _relay(fifo: Path, sink: IO[str], p: Point) -> None:
    """Copy a point's output lines to ours, prefixed with its number; keep its last message for the failure line."""
    with fifo.open(errors="replace") as stream:  # waits for the point to open its end
        for line in stream:
            sink.write(f"[{p.num}] {line}")
            sink.flush()
            if line.strip():
                p.last_message[:] = (p.last_message + [line.strip()])[-20:]


def family_modules(config: DictConfig) -> tuple[str, ...]:
    """The modules a point's model family imports lazily (its config class's ``preload_modules``), from the point's
    composed config without importing torch."""
    model = config.get("model")
    kind = OmegaConf.get_type(model) if isinstance(model, DictConfig) else None
    return tuple(getattr(kind, "preload_modules", ()))
