"""Helpers of the tests that submit real SLURM jobs (tests/test_slurm.py, tests/test_slurm_multinode.py): the
cluster's state, the sweeps' folders, metrics, checkpoints and W&B runs of a job, and the uninterrupted reference run
that interrupted jobs must reproduce."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import torch

from conftest import ROOT, rewardflow_cmd
from launcher.tracking.wandb_offline import find_offline_runs, read_offline_run


def slurm_up() -> bool:
    return (
        subprocess.run(["bash", str(ROOT / "scripts" / "slurm_cluster.sh"), "status"], capture_output=True).returncode
        == 0
    )


SLURM = [
    "cluster=slurm",
    "cluster.gpus_per_node=0",
    "cluster.tasks_per_node=2",
    "trainer.threads=1",
    "trainer.progress=false",
]
SMALL = ["experiment=smoke", "method.prompts_per_step=2"]
STEPS = 100
LONG = [*SMALL, f"trainer.steps={STEPS}", "trainer.ckpt_every=50", "trainer.keep_last_ckpts=4"]


def job_dirs(root: Path) -> list[Path]:
    sweeps = list((root / "train" / "multiruns").iterdir())
    assert len(sweeps) == 1
    return sorted(p for p in sweeps[0].iterdir() if p.is_dir() and p.name.isdigit())


def rows(job: Path) -> list[dict]:
    return [json.loads(l) for l in (job / "metrics.jsonl").read_text().splitlines()]


def untimed(job: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows(job)]


def weights_at(job: Path, step: int) -> dict[str, torch.Tensor]:
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    out = job / f"weights_{step}.pt"
    dcp_to_torch_save(str(job / "checkpoints" / f"step_{step:08d}"), str(out))
    return torch.load(out, weights_only=False)["model"]


def wandb_steps(job: Path) -> tuple[set[str], list[int]]:
    """Run ids and logged steps over every offline folder of the job (a requeued job resumes the same run)."""
    ids, steps = set(), []
    for folder in find_offline_runs(job):
        run = read_offline_run(folder)
        ids.add(run.run_id)
        steps += [int(r["step"]) for r in run.history if "reward/mean" in r]
    return ids, sorted(steps)


def run(args: list[str], timeout: float, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run(
        [*rewardflow_cmd(), *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env
    )


def reference_run(root: Path, steps: int = STEPS) -> Path:
    """The uninterrupted run every interrupted one must reproduce (same ranks and threads, submitit local)."""
    proc = run(
        [
            "cluster=local_multi",
            "cluster.tasks_per_node=2",
            "trainer.threads=1",
            "trainer.progress=false",
            *LONG,
            f"output_root={root}",
        ],
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return job_dirs(root)[0]


def wait_for_step(job_root: Path, step: int, proc: subprocess.Popen, timeout: float = 300) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the sweep ended before the step was reached"
        found = list(job_root.glob("train/multiruns/*/0/metrics.jsonl"))
        if found and len(found[0].read_text().splitlines()) > step:
            return found[0].parent
        time.sleep(0.2)
    raise TimeoutError(f"step {step} not reached")


def assert_same_as_reference(job: Path, reference: Path, steps: int = STEPS) -> None:
    """The run equals the first ``steps`` steps of the uninterrupted reference (data and noise depend on the step
    only, so a shorter run is a prefix of a longer one)."""
    assert untimed(job) == untimed(reference)[:steps]  # every step once, same numbers
    ref_w, w = weights_at(reference, steps - 1), weights_at(job, steps - 1)
    assert ref_w.keys() == w.keys() and all(torch.equal(ref_w[k], w[k]) for k in ref_w)
    ids, logged = wandb_steps(job)
    assert len(ids) == 1, ids  # one W&B run across the requeues
    assert logged == list(range(steps))  # no repeated or missing step
