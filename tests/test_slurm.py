"""The launcher on a real single-node SLURM cluster (scripts/slurm_cluster.sh up): sweeps of multi-rank FSDP2
jobs, preemption and time-limit requeues that resume bitwise, and a dying rank that fails its job promptly."""
from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
import torch

from conftest import ROOT, rewardflow_cmd
from launcher.wandb_offline import find_offline_runs, read_offline_run


def slurm_up() -> bool:
    return subprocess.run(["bash", str(ROOT / "scripts" / "slurm_cluster.sh"), "status"],
                          capture_output=True).returncode == 0


pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    not slurm_up(), reason="no SLURM cluster: `bash scripts/slurm_cluster.sh up` (root, Debian; scripts/test.sh "
                           "does it) starts one")]

SLURM = ["cluster=slurm", "cluster.gpus_per_node=0", "cluster.tasks_per_node=2", "trainer.threads=1",
         "trainer.progress=false"]
SMALL = ["experiment=smoke", "method.prompts_per_step=2"]
STEPS = 200
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
    return subprocess.run([*rewardflow_cmd(), *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env=env)


def test_two_method_sweep_of_two_rank_fsdp2_jobs(tmp_path):
    proc = run(["-m", *SLURM, "method=dance_grpo,flow_grpo_fast", "model=tiny_flux", "trainer.steps=3",
                f"output_root={tmp_path}"], timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = job_dirs(tmp_path)
    assert len(jobs) == 2
    for job in jobs:
        log = (job / "cli.log").read_text()
        assert "rank 1/2" in log and "on 2 rank(s)" in log          # 2 FSDP2 ranks over gloo
        ids, steps = wandb_steps(job)
        assert len(ids) == 1 and steps == [0, 1, 2]
        assert [r["step"] for r in rows(job) if "reward/mean" in r] == [0, 1, 2]
        # the demo's held-out evaluation, both ranks sampling their shares: the base model and the end
        assert [r["step"] for r in rows(job) if "eval/color/mean" in r] == [0, 3]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run every interrupted one must reproduce (same ranks and threads, submitit local)."""
    root = tmp_path_factory.mktemp("reference")
    proc = run(["cluster=local_multi", "cluster.tasks_per_node=2", "trainer.threads=1", "trainer.progress=false",
                *LONG, f"output_root={root}"], timeout=600)
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
    assert untimed(job) == untimed(reference)[:steps]                # every step once, same numbers
    ref_w, w = weights_at(reference, steps - 1), weights_at(job, steps - 1)
    assert ref_w.keys() == w.keys() and all(torch.equal(ref_w[k], w[k]) for k in ref_w)
    ids, logged = wandb_steps(job)
    assert len(ids) == 1, ids                                        # one W&B run across the requeues
    assert logged == list(range(steps))                              # no repeated or missing step


def test_preempted_job_is_requeued_and_resumes_bitwise(tmp_path, reference):
    import submitit

    with open(tmp_path / "stdout", "w") as out, open(tmp_path / "stderr", "w") as err:
        proc = subprocess.Popen([*rewardflow_cmd(), "-m", *SLURM, *LONG, f"output_root={tmp_path}"], cwd=ROOT,
                                stdout=out, stderr=err, text=True)
    job = wait_for_step(tmp_path, 70, proc)                          # after the step-49 checkpoint
    ids = sorted(p.name for p in (job.parent / ".submitit").iterdir() if re.fullmatch(r"\d+(_\d+)?", p.name))
    job_id = ids[-1]                                # "<id>" for a single job, "<array id>_<index>" in an array
    submitit.SlurmJob(folder=job.parent / ".submitit" / "%j", job_id=job_id)._interrupt()   # SIGTERM then USR2
    proc.wait(timeout=600)
    assert proc.returncode == 0, (tmp_path / "stderr").read_text()[-3000:]
    log = (job / "cli.log").read_text()
    assert "will checkpoint at the end of this step" in log and "resuming at step" in log
    assert_same_as_reference(job, reference)


def test_time_limit_requeues_until_done_and_resumes_bitwise(tmp_path, reference):
    # 1-minute jobs with the signal 30 s before the limit: the run needs more than one allocation
    # SLURM signals a 1-minute job 0-30 s after it starts (it checks limits every 30 s); on a time-limit signal the
    # trainer keeps going for half of signal_delay_s, then checkpoints and requeues. 100 steps need several jobs.
    proc = run(["-m", *SLURM, *SMALL, "trainer.steps=100", "trainer.ckpt_every=50", "cluster.timeout_min=1",
                "cluster.signal_delay_s=30", f"output_root={tmp_path}"], timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    job = job_dirs(tmp_path)[0]
    assert (job / "cli.log").read_text().count("resuming at step") >= 1
    assert_same_as_reference(job, reference, steps=100)


def test_a_dying_rank_fails_the_job_promptly_and_the_sweep_reports_it(tmp_path):
    t0 = time.monotonic()
    proc = run(["-m", *SLURM, *SMALL, "trainer.steps=20", "method._target_=slurm_faults.CrashOnRank1",
                f"output_root={tmp_path}"], timeout=600,
               env_extra={"PYTHONPATH": f"{ROOT / 'tests'}:{os.environ.get('PYTHONPATH', '')}"})
    elapsed = time.monotonic() - t0
    assert proc.returncode != 0
    assert "rank 1 crashed on purpose" in proc.stdout + proc.stderr
    assert elapsed < 180, elapsed
