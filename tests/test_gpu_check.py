"""scripts/gpu_check.py: rehearsed on the CPU in a Python environment like the GPU machine's (so a missing wheel or
an unguarded import fails here, not during the rare minutes on a GPU), its time guard, its JSON lines and its FLOP
counting."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.py"
sys.path.insert(0, str(ROOT / "scripts"))

from families import NAMES as TWIN_NAMES  # noqa: E402
from gpu_measure import guard  # noqa: E402
from gpu_measure.record import Recorder, summary_table  # noqa: E402
from gpu_measure.timing import measure_pass  # noqa: E402

SECTIONS = (
    "ceilings",
    "equality",
    "trainer",
    "families",
    "fsdp",
    "vae",
    "reward_tower",
    "bench_jagg",
    "bench_flash",
    "bench_eam",
    "compile",
)
FAMILY_NAMES = tuple(twin.removeprefix("tiny_") for twin in TWIN_NAMES)  # every family a model option selects


def _positive(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def _gpu_like_env(venv_bin: Path, site: Path, cache: Path) -> dict:
    """The environment of the device command: the rehearsal venv's python3 first on PATH, nothing of this
    machine's venv or user site, a fresh twin cache (the GPU machine has none)."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "OUT")}
    env.update(
        PATH=f"{venv_bin}{os.pathsep}{env.get('PATH', '')}",
        PYTHONNOUSERSITE="1",
        GPU_SITE=str(site),
        REWARDFLOW_CACHE=str(cache),
    )
    return env


@pytest.mark.slow
def test_rehearsal_on_a_python_like_the_gpu_machines(tmp_path):
    """The device command (``scripts/gpu_run.sh``: install ``.whl/`` with ``pip install --no-index --no-deps
    --target``, then ``gpu_check.py``) run with ``--cpu-smoke`` by a venv holding only the GPU machine's packages
    (``tests/gpu_machine_env.py``: the listed versions where this CPython 3.11 has wheels of them, this machine's
    torch linked).

    What it proves: every import the check makes, in its own process and in the bench subprocesses, is satisfied by
    the GPU machine's packages plus the ``.whl/`` set, installed by the same command (a wheel missing from
    ``scripts/gpu_wheels.sh`` fails here); the set is one version of each, none of them preinstalled there, and
    small enough to travel; every section runs to the end through the same code at toy sizes and writes its JSON
    lines; the figures relate as they must (FLOPs double with the batch, checkpointing recomputes, FSDP and compiled
    outputs stay finite).

    What it cannot: the GPU machine runs CPython 3.12 and its own torch (here CPython 3.11, and this machine's torch,
    torchvision, triton and numpy: ``LINKED_DESPITE_VERSION`` in tests/gpu_machine_env.py says why; the wheels are
    pure Python or abi3, so the same files install on both), so an API that torch lacks or a 3.12-only difference
    shows only there; and nothing CUDA runs here: NCCL, pinned memory, out-of-memory handling, inductor, the
    attention kernels, and every time, rate and memory figure at real size (test_the_gpu_sizes_run_on_the_meta_device
    covers the published shapes without memory).
    """
    import gpu_machine_env

    t0 = time.monotonic()
    built = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_wheels.sh")], capture_output=True, text=True)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    assert "of the 64 MiB that travel" in built.stdout
    wheels = sorted((ROOT / ".whl").glob("*.whl"))
    names = [gpu_machine_env.normalize(w.name.split("-")[0]) for w in wheels]
    assert wheels and len(names) == len(set(names)), names  # one version of each
    assert not set(names) & set(gpu_machine_env.machine_packages()), names  # nothing the machine has

    venv = gpu_machine_env.build(tmp_path / "venv")
    print("rehearsal venv deviates from the GPU machine in:", venv.deviations)
    env = _gpu_like_env(venv.python.parent, tmp_path / "site", tmp_path / "twins")
    bare = subprocess.run([str(venv.python), "-c", "import diffusers"], env=env, capture_output=True, text=True)
    assert bare.returncode != 0 and "diffusers" in bare.stderr  # only the wheels bring it

    out = tmp_path / "out"
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_run.sh"), "--cpu-smoke", "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    _assert_smoke_run(out, proc.stdout, venv, tmp_path / "site")
    print(f"rehearsal: {time.monotonic() - t0:.0f} s (wheels, venv, smoke run)")


def _assert_smoke_run(out: Path, stdout: str, venv, site: Path) -> None:
    """Every section ok, each family's six measurements, and the relations their figures must satisfy."""
    lines = [json.loads(x) for x in (out / "gpu_check.jsonl").read_text().splitlines()]
    by_label = {(x["section"], x["label"]): x for x in lines}

    env_line = by_label[("env", "environment")]
    assert env_line["device"] == "cpu" and env_line["packages"]["torch"]["version"] == venv.linked["torch"]
    assert env_line["packages"]["transformers"]["version"] == venv.installed["transformers"]
    for carried in ("diffusers", "hydra-core", "omegaconf", "open_clip_torch"):
        assert env_line["packages"][carried]["from"] == str(site), carried
    sections = {x["section"]: x for x in lines if x["label"] == "section"}
    assert list(sections) == list(SECTIONS)
    assert all(s["status"] == "ok" for s in sections.values()), sections
    assert by_label[("check", "whole check")]["status"] == "ok"

    assert _positive(by_label[("ceilings", "matmul bf16 256^3")]["tflops"])
    assert _positive(by_label[("ceilings", "copy host->device pageable")]["gb_per_s"])
    assert by_label[("ceilings", "copy host<->device pinned")]["status"] == "skipped"

    for name in FAMILY_NAMES:
        rows = {
            (x["batch"], x["pass"], x["checkpointing"]): x
            for x in lines
            if x["section"] == "families" and x.get("family") == name and "pass" in x
        }
        assert len(rows) == 6 and all(r["status"] == "ok" for r in rows.values()), (name, rows)
        for r in rows.values():
            assert _positive(r["seconds"]) and _positive(r["executed_tflop"]) and _positive(r["mfu"]), r
            assert r["out_finite"] and r.get("grads_finite", True), r
        fwd1, fwd2 = rows[(1, "fwd", None)], rows[(2, "fwd", None)]
        assert fwd2["executed_tflop"] == pytest.approx(2 * fwd1["executed_tflop"], rel=0.01)
        for batch in (1, 2):
            ckpt, plain = rows[(batch, "fwd_bwd", True)], rows[(batch, "fwd_bwd", False)]
            assert ckpt["executed_tflop"] > plain["executed_tflop"]  # the recomputed forward
            assert ckpt["model_tflop"] == pytest.approx(plain["model_tflop"], rel=1e-9)  # rows scale FLOPs

    fsdp = [x for x in lines if x["section"] == "fsdp" and x["label"] != "section"]
    assert [x["label"] for x in fsdp] == [
        "flux b1 fwd+bwd plain",
        "flux b1 fwd+bwd fsdp reshard on",
        "flux b1 fwd+bwd fsdp reshard off",
    ]
    assert all(x["status"] == "ok" and x["out_finite"] and x["backend"] == "gloo" for x in fsdp)
    assert all(_positive(x["ratio_to_plain"]) for x in fsdp[1:])

    decodes = [x for x in lines if x["section"] == "vae" and x["label"] != "section"]
    assert [x["batch"] for x in decodes] == [1, 8, 24]
    assert all(x["out_finite"] and x["out_shape"][0] == x["batch"] and _positive(x["seconds"]) for x in decodes)
    tower = [x for x in lines if x["section"] == "reward_tower" and x["label"] != "section"]
    assert len(tower) == 2 and all(x["out_finite"] and x["batch"] == 24 for x in tower)

    jagg = by_label[("bench_jagg", "JAGG / DanceGRPO update time")]["result"]
    assert jagg["bwd_count_ratio"] == pytest.approx(0.7) and jagg["config"]["device"] == "cpu"
    assert _positive(jagg["update_time_ratio"])
    flash = by_label[("bench_flash", "Flash-GRPO / Flow-GRPO update time")]["result"]
    assert flash["bwd_count_ratio_vs_flow_grpo"] == pytest.approx(1 / 5)  # 6 steps: Flow-GRPO trains 5
    eam = by_label[("bench_eam", "AM / EAM iteration time")]["result"]
    assert eam["nfe_ratio_am_over_eam"] == pytest.approx(
        162 / 19, rel=1e-3
    )  # AM: 40 + 1 + 1 forwards, 40 VJPs, 20 fwd+bwd (docs/methods/eam.md)
    for bench in ("bench_jagg", "bench_flash", "bench_eam"):
        assert (out / f"{bench}.log").is_file()

    compiled = by_label[("compile", "flux 1+1 blocks b2 fwd+bwd compiled")]
    assert compiled["backend"] == "aot_eager" and compiled["rel_diff_vs_eager"] < 2e-2
    assert _positive(compiled["speedup"]) and _positive(compiled["compile_s"])
    table = stdout[stdout.index("\nsection ") :]  # the summary table, last
    assert all(x["label"] in table for x in lines if x["section"] == "families")


@pytest.mark.slow
def test_the_gpu_sizes_run_on_the_meta_device():
    """What the CPU smoke cannot reach, checked without memory: every published transformer, called with the GPU
    profile's inputs at batch 1 and at its batched size, returns its latents' shape, and its counted FLOPs grow
    exactly with the batch (what ``model_tflop`` of a batched checkpointed pass relies on); the FLUX.1 VAE decodes
    64-pixel latents to 512-pixel images; the ViT-H-14 tower embeds a batch of 224-pixel images."""
    import open_clip
    from diffusers import AutoencoderKL
    from torch.utils.flop_counter import FlopCounterMode

    from gpu_measure.profile import GPU
    from gpu_measure.reward_path import FLUX1_VAE, TOWER_ARCH
    from models.real_transformers import FAMILIES

    meta = torch.device("meta")
    for name, fam in FAMILIES.items():
        with meta:
            model = fam.transformer_class()(**fam.config)
        flops = {}
        for batch in (1, GPU.batched[name]):
            shape = dataclasses.replace(fam.shape, rows=fam.shape.rows * batch)
            inputs = fam.call_inputs(fam.config, shape, meta, torch.float32)  # autocast has no meta device
            counter = FlopCounterMode(display=False)
            with counter:
                out = model(**inputs, return_dict=False)[0]
            assert out.shape == inputs["hidden_states"].shape, name
            flops[batch] = counter.get_total_flops()
        assert flops[GPU.batched[name]] == GPU.batched[name] * flops[1] > 0, (name, flops)
    tower_cfg = open_clip.get_model_config(TOWER_ARCH)
    with meta:
        vae = AutoencoderKL(**FLUX1_VAE)
        tower = open_clip.CLIP(**tower_cfg).visual
        assert vae.decode(torch.randn(2, 16, 64, 64), return_dict=False)[0].shape == (2, 3, 512, 512)
        embedded = tower(torch.randn(GPU.tower_batch, 3, 224, 224))
        assert embedded.shape == (GPU.tower_batch, tower_cfg["embed_dim"])


def test_deadline_stops_a_block_and_nested_deadlines_hand_the_stop_outwards():
    handler, timer = signal.getsignal(signal.SIGALRM), signal.getitimer(signal.ITIMER_REAL)[0]  # pytest-timeout's
    t0 = time.monotonic()
    with guard.Deadline(0.2) as d:
        while True:
            pass
    assert d.expired and time.monotonic() - t0 < 2
    with guard.Deadline(0.2) as outer:
        with guard.Deadline(30) as inner:
            while True:
                pass
    assert outer.expired and not inner.expired
    with guard.Deadline(5) as quick:
        pass
    assert not quick.expired
    time.sleep(0.05)  # the alarm was disarmed: nothing fires later
    assert signal.getsignal(signal.SIGALRM) is handler  # what was there before is back
    assert (signal.getitimer(signal.ITIMER_REAL)[0] > 0) == (timer > 0)


def test_runner_skips_short_shares_gives_unused_time_on_and_records_errors():
    start = time.monotonic()
    runner = guard.SectionRunner(
        guard.MARGIN_S + 20, ["a", "b", "c"], {"a": 1, "b": 1, "c": 1}, {"a": 0, "b": 0, "c": 15}, start=start
    )
    assert runner.share("a") == pytest.approx(20 / 3, abs=0.5)
    seen = {}
    a = runner.run("a", lambda share: seen.update(a=share))
    assert a["status"] == "ok" and seen["a"] == pytest.approx(20 / 3, abs=0.5)
    assert runner.share("b") == pytest.approx(10, abs=0.5)  # a's unused time is shared by b and c

    def fail(share):
        raise RuntimeError("boom")

    b = runner.run("b", fail)
    assert b["status"] == "error" and "boom" in b["error"]
    c = runner.run("c", lambda share: None)  # ~20 s left, all c's: above its 15 s minimum
    assert c["status"] == "ok" and c["allowance_s"] >= 15

    late = guard.SectionRunner(guard.MARGIN_S + 1, ["x"], {"x": 1}, {"x": 5}, start=start)
    x = late.run("x", lambda share: pytest.fail("a skipped section must not run"))
    assert x["status"] == "skipped" and "needs" in x["reason"]

    def spin(share):
        while True:
            pass

    slow = guard.SectionRunner(guard.MARGIN_S + 0.5, ["s"], {"s": 1}, {"s": 0}, start=time.monotonic())
    s = slow.run("s", spin)
    assert s["status"] == "timeout" and s["seconds"] < 3


def test_recorder_writes_each_line_at_once_as_strict_json_and_the_table_shows_it(tmp_path):
    rec = Recorder(tmp_path, time.monotonic(), echo=lambda msg: None)
    rec.write("families", "flux b1 fwd", seconds=0.25, tflops=412.5, mfu=0.52, peak_gib=61.0, value="412 TFLOP/s")
    assert json.loads((tmp_path / "gpu_check.jsonl").read_text())["tflops"] == 412.5  # on disk before the next
    rec.write("fsdp", "flux b1 fwd+bwd plain", status="oom", error="CUDA out of memory", seconds=float("nan"))
    lines = [json.loads(x) for x in (tmp_path / "gpu_check.jsonl").read_text().splitlines()]
    assert lines[1]["seconds"] is None and lines[1]["status"] == "oom" and lines == rec.lines
    table = summary_table(rec.lines).splitlines()
    assert table[0].split()[:3] == ["section", "label", "status"]
    assert "52.0%" in table[2] and "412.5" in table[2] and "CUDA out of memory" in table[3]


def test_measure_pass_counts_the_flops_of_what_it_times():
    a, b = torch.randn(64, 32), torch.randn(32, 16)
    m = measure_pass(torch.device("cpu"), lambda: a @ b, max_reps=3, budget_s=5.0)
    assert m["executed_tflop"] * 1e12 == 2 * 64 * 32 * 16 and m["flop_by_op"] == {"mm": 2 * 64 * 32 * 16}
    assert 1 <= m["reps"] <= 3 and _positive(m["seconds"]) and torch.equal(m["out"], a @ b)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message printed without CUDA")
def test_without_cuda_it_stops_with_one_line():
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", "/dev/null"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "no CUDA device" in lines[0] and "--cpu-smoke" in lines[0]


@pytest.mark.slow
@pytest.mark.parametrize("twin", TWIN_NAMES)
def test_call_inputs_are_what_the_adapter_hands_the_transformer(twin):
    """models/real_transformers.py rebuilds each adapter's transformer call without the adapter: the same keyword
    arguments, tensor ranks and dtypes, rows (CFG doubles them) and timestep values as the adapter's ``velocity``."""
    from families import FAMILIES as TWINS
    from models.real_transformers import FAMILIES, SIGMA

    bb = TWINS[twin].build(device="cpu")
    seen: dict = {}
    hook = bb.transformer.register_forward_pre_hook(lambda m, args, kwargs: seen.update(kwargs), with_kwargs=True)
    with torch.no_grad():
        bb.velocity(bb.initial_noise(1), torch.full((1,), SIGMA), bb.encode_prompts(["a red square"]))
    hook.remove()
    fam = FAMILIES[twin.removeprefix("tiny_")]
    ours = fam.call_inputs(fam.transformer_config(tiny=True), fam.smoke_shape, torch.device("cpu"), bb.dtype)
    assert set(ours) | {"return_dict"} == set(seen)
    for key, value in ours.items():
        theirs = seen[key]
        if torch.is_tensor(value):
            assert torch.is_tensor(theirs) and (value.dtype, value.dim()) == (theirs.dtype, theirs.dim()), key
        else:
            assert type(value) is type(theirs) and (value is None or len(value) == len(theirs)), key
    assert ours["hidden_states"].shape[0] == seen["hidden_states"].shape[0]
    assert torch.equal(ours["timestep"], seen["timestep"])
