"""Jobs across the two nodes of the test cluster (scripts/slurm_cluster.sh up: rfnode1 and rfnode2, each a slurmd in
its own network namespace, with its own address, hostname and node-local tmpfs at $SLURM_CI_ROOT/node-local, the
rest of the filesystem shared). What only several hosts exercise: the rendezvous at the first node's address, ranks
per node, FSDP2 and HSDP collectives between hosts, a preemption signal on every node and the requeue of a multi-node
job, and caches on node-local disks."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, rewardflow_cmd
from slurm_support import SMALL, assert_same_as_reference, job_dirs, rows, run, slurm_up, untimed, wait_for_step


def cluster_nodes() -> list[str]:
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True).stdout
    return sorted(set(out.split()))


UP = slurm_up()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not UP,
        reason="no SLURM cluster: `bash scripts/slurm_cluster.sh up` (root, Debian; "
        "scripts/test.sh does it) starts one",
    ),
    pytest.mark.skipif(
        UP and len(cluster_nodes()) < 2,
        reason="the SLURM cluster has one node (it was started with SLURM_CI_NODES=1, or "
        "network namespaces could not be made); multi-node jobs need 2",
    ),
]

TWO_NODES = [
    "cluster=slurm",
    "cluster.gpus_per_node=0",
    "cluster.nodes=2",
    "trainer.threads=1",
    "trainer.progress=false",
]
NODE_LOCAL = Path(os.environ.get("SLURM_CI_ROOT", "/tmp/slurm-ci")) / "node-local"  # a tmpfs of its own per node


def job_id(job: Path) -> str:
    ids = sorted(p.name for p in (job.parent / ".submitit").iterdir() if re.fullmatch(r"\d+(_\d+)?", p.name))
    return ids[-1]  # "<id>" for a single job, "<array id>_<index>" in an array


def nodes_of(job: Path) -> str:
    """The nodes SLURM gave the job, as accounting recorded them (e.g. rfnode[1-2])."""
    out = subprocess.run(
        ["sacct", "-j", job_id(job), "-X", "-n", "-P", "-o", "NodeList"], capture_output=True, text=True, check=True
    ).stdout
    return out.split()[-1]


def run_log(job: Path) -> str:
    """The run's own log (Hydra's job log, next to metrics.jsonl)."""
    return "".join(p.read_text() for p in job.glob("*.log"))


def task_log(job: Path, task: int) -> str:
    """What task (rank) ``task`` wrote (stdout, where its log lines go, then stderr), on whichever node it ran:
    submitit's folder is on the shared filesystem."""
    jid = job_id(job)
    return "".join((job.parent / ".submitit" / jid / f"{jid}_{task}_log.{ext}").read_text() for ext in ("out", "err"))


def on_each_node(command: str) -> dict[str, str]:
    """``command``'s output on every node of the cluster, by host name (a one-task-per-node job step). srun merges
    the tasks' stdout as it arrives, so blocks of two nodes can interleave: every line carries its host instead."""
    nodes = cluster_nodes()
    out = subprocess.run(
        [
            "srun",
            f"-N{len(nodes)}",
            "--ntasks-per-node=1",
            "-t",
            "1",
            "bash",
            "-c",
            f'set -o pipefail; h=$(hostname -s); echo "$h|"; ({command}) | sed "s/^/$h|/"',
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    per_node: dict[str, list[str]] = {}
    for line in out.splitlines():
        host, _, text = line.partition("|")
        per_node.setdefault(host, []).extend([text] if text else [])
    return {host: "\n".join(lines) for host, lines in per_node.items()}


def test_multinode_fsdp_job_of_one_task_per_node_matches_the_single_node_reference(tmp_path, slurm_reference):
    proc = run(
        [
            "-m",
            *TWO_NODES,
            "cluster.tasks_per_node=1",
            "cluster.mesh=fsdp",  # the default from 2 nodes on is hsdp
            *SMALL,
            "trainer.steps=4",
            f"output_root={tmp_path}",
        ],
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    job = job_dirs(tmp_path)[0]
    assert nodes_of(job) == "rfnode[1-2]"
    assert "FSDP2 mesh: fsdp 2" in run_log(job)
    # rank 0 on rfnode1, rank 1 on rfnode2: the same numbers as 2 ranks on one host
    assert untimed(job) == untimed(slurm_reference)[:4]


@pytest.fixture(scope="module")
def four_rank_reference(tmp_path_factory) -> Path:
    """4 ranks on one host, 1-D mesh, its own cache (the twin built by a 1-thread rank, as the nodes build theirs)."""
    root = tmp_path_factory.mktemp("reference4")
    proc = run(
        [
            "cluster=local_multi",
            "cluster.tasks_per_node=4",
            "trainer.threads=1",
            "trainer.progress=false",
            "experiment=smoke",
            "method.prompts_per_step=4",
            f"cluster.cache_dir={root / 'cache'}",
            f"output_root={root}",
        ],
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return job_dirs(root)[0]


def test_multinode_hsdp_job_with_node_local_cache_matches_the_fsdp_reference(tmp_path, four_rank_reference):
    cache = NODE_LOCAL / f"rewardflow-{tmp_path.name}"
    proc = run(
        [
            "-m",
            *TWO_NODES,
            "cluster.tasks_per_node=2",
            "cluster.mesh=hsdp",
            f"cluster.cache_dir={cache}",
            "experiment=smoke",
            "method.prompts_per_step=4",
            f"output_root={tmp_path}",
        ],
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    job = job_dirs(tmp_path)[0]
    assert nodes_of(job) == "rfnode[1-2]"
    log = run_log(job)
    assert "FSDP2 mesh: hsdp 2 x 2 (replicate x shard)" in log
    assert "node-local (not shared by the 2 nodes): the first rank of each node (ranks 0, 2)" in log

    # each node built the twin once into its own disk; nothing of it is visible from this host
    listings = on_each_node(f"ls -A {cache}")
    assert sorted(listings) == ["rfnode1", "rfnode2"]
    for node, listing in listings.items():
        twins = [n for n in listing.split() if not n.endswith(".lock")]
        assert len(twins) == 1 and twins[0].startswith("tiny_flux-"), (node, listing)  # no temporaries or probes
    assert not cache.exists()

    # HSDP sums gradients in another order than the 1-D mesh: equal up to float rounding
    ref, got = untimed(four_rank_reference), untimed(job)
    assert [r.keys() for r in got] == [r.keys() for r in ref]
    for r_got, r_ref in zip(got, ref):
        assert r_got == pytest.approx(r_ref, rel=1e-4, abs=1e-6)


def test_multinode_preempted_job_is_requeued_and_resumes_bitwise(tmp_path, slurm_reference):
    import submitit

    with open(tmp_path / "stdout", "w") as out, open(tmp_path / "stderr", "w") as err:
        proc = subprocess.Popen(
            [
                *rewardflow_cmd(),
                "-m",
                *TWO_NODES,
                "cluster.tasks_per_node=1",
                "cluster.mesh=fsdp",  # the reference's mesh (from 2 nodes on the default is hsdp)
                *SMALL,
                "trainer.steps=100",
                "trainer.ckpt_every=50",
                "trainer.keep_last_ckpts=4",
                f"output_root={tmp_path}",
            ],
            cwd=ROOT,
            stdout=out,
            stderr=err,
            text=True,
        )
    job = wait_for_step(tmp_path, 60, proc)  # after the step-49 checkpoint
    first_id = job_id(job)
    submitit.SlurmJob(folder=job.parent / ".submitit" / "%j", job_id=first_id)._interrupt()  # SIGTERM, then USR2
    proc.wait(timeout=600)
    assert proc.returncode == 0, (tmp_path / "stderr").read_text()[-3000:]
    assert nodes_of(job) == "rfnode[1-2]"
    log = run_log(job)
    assert "will checkpoint at the end of this step" in log and "resuming at step" in log
    assert "received SIGUSR2 (preemption)" in task_log(job, 1)  # the signal reached rank 1 on rfnode2
    assert len(rows(job)) == 100
    assert_same_as_reference(job, slurm_reference, steps=100)
