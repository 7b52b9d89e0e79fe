"""Cluster defaults from the plan and the node (issue 27, item 4): the mesh, cpus_per_task, mem_gb and the signal
delay composed with ``cluster=slurm``, threads from the CPUs a task may use, the GPU a rank binds, and phase timers
read from device events (docs/clusters.md#what-a-job-asks-slurm-for)."""

from __future__ import annotations

import subprocess

import pytest
from omegaconf import OmegaConf

from conftest import ROOT, compose, rewardflow_cmd
from launcher.cluster.device_check import default_threads
from launcher.plan.checkpoint_size import STEP_AND_REQUEUE_S, checkpoint_bytes, signal_delay_s
from launcher.plan.host_memory import RUNTIME_BYTES, host_lines
from launcher.tracking.phase_timer import PhaseTimer
from rewardflow.errors import ConfigError
from rewardflow.gpu_binding import cuda_device_index

FLUX = ["cluster=slurm", "model=flux", "method=dance_grpo"]


def plain(cfg) -> dict:
    return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)  # type: ignore[return-value]


# ------------------------------------------------------------------------------------------------- composition
@pytest.mark.parametrize("nodes, mesh", [(1, "fsdp"), (2, "hsdp"), (12, "hsdp")])
def test_the_mesh_defaults_to_hsdp_from_two_nodes_on(nodes, mesh):
    assert compose([*FLUX, f"cluster.nodes={nodes}"]).cluster.mesh == mesh
    assert compose([*FLUX, f"cluster.nodes={nodes}", "cluster.mesh=fsdp"]).cluster.mesh == "fsdp"  # the user's wins


def test_cpus_and_memory_are_filled_from_the_plan_and_the_node_and_the_users_values_win():
    c = compose([*FLUX, "cluster.nodes=2"]).cluster
    assert c.cpus_per_task == 8 and c.mem_gb >= 100  # 8 ranks holding T5 (9 GiB) and more each
    assert compose([*FLUX, "cluster.gpus_per_node=16"]).cluster.cpus_per_task == 4  # 64 CPUs over 16 ranks
    assert compose([*FLUX, "cluster.gpus_per_node=4"]).cluster.mem_gb < c.mem_gb  # half the ranks, half the memory
    hps = compose([*FLUX, "reward=hps"]).cluster.mem_gb
    assert hps > c.mem_gb  # the reward model is in every rank's host memory too
    mine = compose([*FLUX, "cluster.cpus_per_task=12", "cluster.mem_gb=500", "cluster.signal_delay_s=900"]).cluster
    assert (mine.cpus_per_task, mine.mem_gb, mine.signal_delay_s) == (12, 500, 900)
    site = compose([*FLUX, "cluster.mem_gb=null", "cluster.cpus_per_task=null"]).cluster
    assert site.mem_gb is None and site.cpus_per_task is None  # null: the site's defaults
    cpu_job = compose(["cluster=slurm", "cluster.gpus_per_node=0", "cluster.tasks_per_node=2"]).cluster
    assert cpu_job.cpus_per_task is None and cpu_job.mem_gb is None  # a CPU node's shape is unknown


def test_host_memory_counts_the_text_encoders_reward_and_offloaded_states():
    cfg = plain(compose([*FLUX, "reward=hps"]))
    lines = dict(host_lines(cfg))
    assert lines["runtime (Python, torch, CUDA libraries)"] == RUNTIME_BYTES
    assert 9.0 < lines["text encoders"] / 2**30 < 9.2  # CLIP-L + T5-XXL in bf16
    assert 3.6 < lines["reward model (fp32 while loading)"] / 2**30 < 3.8  # HPS (ViT-H-14) in fp32
    offloaded = dict(host_lines(plain(compose([*FLUX, "reward=hps", "method.trajectory_offload=true"]))))
    assert offloaded["offloaded trajectory states"] > 0
    assert "transformer, loaded whole (one rank)" not in lines  # 8 ranks: sharded start-up
    single = dict(host_lines(plain(compose([*FLUX, "cluster.gpus_per_node=1"]))))
    assert single["transformer, loaded whole (one rank)"] > 40 * 2**30  # 11.9 B in fp32


def test_the_signal_delay_grows_with_the_planned_checkpoint():
    lora, full = (plain(compose([*FLUX, f"model.finetune={f}"])) for f in ("lora", "full"))
    ema = plain(compose([*FLUX, "model.finetune=full", "trainer.ema_decay=0.995"]))
    assert checkpoint_bytes(full) == pytest.approx(11.90e9 * 12, rel=0.01)  # fp32 weights + AdamW's 2 moments
    assert checkpoint_bytes(ema) == pytest.approx(checkpoint_bytes(full) * 4 / 3)  # + the EMA: 190 GB
    assert checkpoint_bytes(lora) < checkpoint_bytes(full) / 100
    delays = [signal_delay_s(c) for c in (lora, full, ema)]
    assert delays == sorted(delays) and delays[0] < delays[1] < delays[2]
    assert delays[0] >= 2 * STEP_AND_REQUEUE_S and all(d % 60 == 0 for d in delays)
    assert delays[2] >= 2 * 190  # half the delay holds the 190 GB write at 1 GB/s per node
    assert compose([*FLUX, "model.finetune=full", "trainer.ema_decay=0.995"]).cluster.signal_delay_s == delays[2]
    # hsdp on 2 nodes: each node writes a whole shard group's share; fsdp over 16 ranks: half of it
    hsdp = plain(compose([*FLUX, "model.finetune=full", "cluster.nodes=2"]))
    fsdp = plain(compose([*FLUX, "model.finetune=full", "cluster.nodes=2", "cluster.mesh=fsdp"]))
    assert signal_delay_s(hsdp) == delays[1] > signal_delay_s(fsdp)


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["cluster.mem_gb=0"], "cluster.mem_gb"),
        (["cluster.timeout_min=3"], "cluster.signal_delay_s"),  # the planned delay (>= 240 s) outlasts the job
        (["cluster.signal_delay_s=-1"], "cluster.signal_delay_s"),
        (["cluster.cpus_per_task=0"], "cluster.cpus_per_task"),
    ],
)
def test_bad_cluster_resources_name_the_key(overrides, key):
    from launcher.validate import validate

    cfg = compose(["cluster=slurm", "cluster.tasks_per_node=2", *overrides])
    with pytest.raises(ConfigError, match=key) as err:
        validate(cfg)
    assert "Fix:" in str(err.value)


def test_cfg_job_resolve_prints_the_computed_cluster_keys():
    res = subprocess.run(
        [*rewardflow_cmd(), "--cfg", "job", "--resolve", "cluster=slurm", "cluster.nodes=2"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"},
    )
    assert res.returncode == 0, res.stderr[-2000:]
    cluster = OmegaConf.create(res.stdout).cluster
    assert cluster.mesh == "hsdp" and cluster.cpus_per_task == 8 and isinstance(cluster.mem_gb, int)
    assert isinstance(cluster.signal_delay_s, int)


# ------------------------------------------------------------------------------------------------ in the task
@pytest.mark.parametrize(
    "env, usable, local_size, threads",
    [
        ({"SLURM_CPUS_PER_TASK": "8"}, 224, 8, 8),  # SLURM's count, not the node's 224
        ({"SLURM_CPUS_PER_TASK": "8"}, 4, 8, 4),  # bound to fewer CPUs than asked: what the mask allows
        ({}, 16, 2, 8),  # no SLURM: the mask split over the node's local processes
        ({}, 3, 8, 1),  # never 0
        ({"REWARDFLOW_PARALLEL_POINTS": "2"}, 2, 1, 1),  # two points of a local sweep side by side share 2 CPUs
        ({"REWARDFLOW_PARALLEL_POINTS": "2"}, 16, 2, 4),  # ... and each point's processes split its half
    ],
)
def test_threads_come_from_the_cpus_the_task_may_use(env, usable, local_size, threads):
    assert default_threads(local_size, env=env, usable_cpus=usable) == threads


def test_threads_read_the_affinity_mask_not_the_core_count(monkeypatch):
    import os

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 256)
    assert default_threads(1, env={}) == 3


@pytest.mark.parametrize(
    "visible, local_rank, index",
    [
        ("3", 3, 0),  # one GPU bound per task: device 0 whatever the local rank
        ("0,1,2,3,4,5,6,7", 3, 3),  # the node's GPUs: the local rank picks one
        ("GPU-aa,GPU-bb", 3, 1),  # a subset of several per task: modulo its size
    ],
)
def test_the_gpu_index_works_with_one_or_all_gpus_visible(visible, local_rank, index, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert cuda_device_index(local_rank) == index
    assert cuda_device_index(local_rank, env={"CUDA_VISIBLE_DEVICES": visible}) == index
    assert cuda_device_index(local_rank, device_count=1) == 0  # torch's count wins when given


def test_a_rank_without_a_gpu_is_told_so():
    with pytest.raises(RuntimeError, match="sees no CUDA GPU"):
        cuda_device_index(0, device_count=0)


# ------------------------------------------------------------------------------------------------ phase timers
class FakeEvent:
    """A CUDA event stand-in: ``record`` stamps the next time of a fake device clock (ms); ``elapsed_time`` refuses
    to answer before ``synchronize``, as CUDA does while an event has not completed."""

    clock = [0.0]
    log: list[str] = []

    def __init__(self):
        self.t: float | None = None
        self.done = False

    def record(self):
        FakeEvent.clock[0] += 250.0
        self.t = FakeEvent.clock[0]
        FakeEvent.log.append("record")

    def synchronize(self):
        FakeEvent.log.append("sync")
        for e in FakeEvent.made:
            e.done = True

    def elapsed_time(self, end) -> float:
        if not (self.done and end.done):
            raise RuntimeError("CUDA error: device not ready")
        return end.t - self.t

    made: list[FakeEvent] = []


def fake_event() -> FakeEvent:
    e = FakeEvent()
    FakeEvent.made.append(e)
    return e


def test_the_phase_timer_records_events_and_reads_them_once_per_step():
    FakeEvent.clock, FakeEvent.log, FakeEvent.made = [0.0], [], []
    timer = PhaseTimer("cuda", event_factory=fake_event)
    with timer("rollout"):
        pass
    with timer("update"):
        pass
    with timer("update"):  # a phase entered twice in a step adds up
        pass
    assert "sync" not in FakeEvent.log  # no host sync while the phases run
    assert timer.read() == {"rollout": 0.25, "update": 0.5}
    assert FakeEvent.log.count("sync") == 1  # one wait, for the last event, when the step reads


def test_the_phase_timer_uses_the_wall_clock_on_the_cpu():
    import time

    timer = PhaseTimer("cpu")
    with timer("reward"):
        time.sleep(0.01)
    assert not timer.events and 0.005 < timer.read()["reward"] < 1.0


def test_the_phase_timer_adds_no_host_sync_to_the_update():
    torch = pytest.importorskip("torch")
    from launcher.train.host_syncs import HostSyncCounter

    timer = PhaseTimer(torch.device("cpu"), event_factory=fake_event)
    with HostSyncCounter() as syncs, timer("update"):
        torch.ones(3).mul_(2)
    assert syncs.total == 0
