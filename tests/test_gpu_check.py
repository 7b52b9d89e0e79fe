"""scripts/gpu_check.py: its CPU smoke run reports every section with sane figures (so the GPU check cannot rot
between the rare runs on a GPU), and its time guard stops, skips and re-shares as documented."""
from __future__ import annotations

import importlib.util
import json
import math
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from families import NAMES as TWIN_NAMES

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.py"


def _load():
    """The script as a module (registered first: its dataclasses look their module up while being created)."""
    if "gpu_check" not in sys.modules:
        spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
        module = importlib.util.module_from_spec(spec)
        sys.modules["gpu_check"] = module
        spec.loader.exec_module(module)
    return sys.modules["gpu_check"]


def _positive(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


@pytest.mark.slow
def test_cpu_smoke_reports_every_section(tmp_path):
    out = tmp_path / "gpu_check.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--cpu-smoke", "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-1]
    res = json.loads(last)
    assert json.loads(out.read_text()) == res
    assert set(res) == {"env", "bf16", "fsdp", "bench_jagg", "bench_flash", "bench_eam", "check"}
    assert res["check"]["ok"] and res["check"]["profile"] == "cpu-smoke"
    assert res["env"]["device"] == "cpu" and res["env"]["torch"] == torch.__version__

    bf16 = res["bf16"]
    assert bf16["status"] == "ok"
    from models.real_transformers import FAMILIES

    assert set(FAMILIES) <= set(bf16)                    # every family with a published transformer config
    for name in FAMILIES:
        fam = bf16[name]
        assert fam["status"] == "ok", fam
        assert all(_positive(fam[k]) for k in ("fwd_s", "fwd_bwd_s", "build_s", "grad_norm", "image_tokens")), fam
        assert fam["fwd_bwd_s"] > fam["fwd_s"] and fam["reps"] >= 1
        assert fam["out_finite"] and fam["param_dtype"] == "float32" and fam["autocast"] == "bf16"

    fsdp = res["fsdp"]
    assert fsdp["status"] == "ok" and fsdp["backend"] == "gloo" and fsdp["world_size"] == 1
    assert fsdp["loss_finite"] and all(math.isfinite(x) for x in fsdp["losses"] + fsdp["grad_norms"])
    assert fsdp["params_changed"] and fsdp["watched_tensors"] > 0 and _positive(fsdp["max_abs_update"])
    assert _positive(fsdp["step_s"]) and _positive(fsdp["first_step_s"])

    for name in ("bench_jagg", "bench_flash", "bench_eam"):
        assert res[name]["status"] == "ok" and res[name]["returncode"] == 0, res[name]
        assert Path(res[name]["log"]).is_file()
    jagg = res["bench_jagg"]["result"]
    assert jagg["bwd_count_ratio"] == pytest.approx(0.7) and jagg["config"]["device"] == "cpu"
    assert _positive(jagg["update_time_ratio"]) and _positive(jagg["step_time_ratio"])
    flash = res["bench_flash"]["result"]
    assert flash["bwd_count_ratio_vs_flow_grpo"] == pytest.approx(1 / 5)        # 6 steps: Flow-GRPO trains 5
    assert _positive(flash["update_time_ratio_vs_flow_grpo"]) and flash["device"] == "cpu"
    eam = res["bench_eam"]["result"]
    assert eam["nfe_ratio_am_over_eam"] == pytest.approx(161 / 19, rel=1e-3)
    assert _positive(eam["iter_time_ratio_am_over_eam"]) and eam["cost_device"] == "cpu"


def test_deadline_stops_a_block_and_nested_deadlines_hand_the_stop_outwards():
    gc = _load()
    handler, timer = signal.getsignal(signal.SIGALRM), signal.getitimer(signal.ITIMER_REAL)[0]   # pytest-timeout's
    t0 = time.monotonic()
    with gc.Deadline(0.2) as d:
        while True:
            pass
    assert d.expired and time.monotonic() - t0 < 2
    with gc.Deadline(0.2) as outer:
        with gc.Deadline(30) as inner:
            while True:
                pass
    assert outer.expired and not inner.expired
    with gc.Deadline(5) as quick:
        pass
    assert not quick.expired
    time.sleep(0.05)                   # the alarm was disarmed: nothing fires later
    assert signal.getsignal(signal.SIGALRM) is handler                 # what was there before is back
    assert (signal.getitimer(signal.ITIMER_REAL)[0] > 0) == (timer > 0)


def test_runner_skips_short_shares_gives_unused_time_on_and_records_errors():
    gc = _load()
    start = time.monotonic()
    runner = gc.SectionRunner(gc.MARGIN_S + 20, ["a", "b", "c"], {"a": 1, "b": 1, "c": 1},
                              {"a": 0, "b": 0, "c": 15}, start=start)
    assert runner.share("a") == pytest.approx(20 / 3, abs=0.5)
    a = runner.run("a", lambda res, share: res.update(value=1))
    assert a["status"] == "ok" and a["value"] == 1
    assert runner.share("b") == pytest.approx(10, abs=0.5)       # a's unused time is shared by b and c

    def fail(res, share):
        raise RuntimeError("boom")

    b = runner.run("b", fail)
    assert b["status"] == "error" and "boom" in b["error"]
    c = runner.run("c", lambda res, share: None)          # ~20 s left, all c's: above its 15 s minimum
    assert c["status"] == "ok" and c["allowance_s"] >= 15

    late = gc.SectionRunner(gc.MARGIN_S + 1, ["x"], {"x": 1}, {"x": 5}, start=start)
    x = late.run("x", lambda res, share: pytest.fail("a skipped section must not run"))
    assert x["status"] == "skipped" and "needs" in x["reason"]

    def spin(res, share):
        while True:
            pass

    slow = gc.SectionRunner(gc.MARGIN_S + 0.5, ["s"], {"s": 1}, {"s": 0}, start=time.monotonic())
    s = slow.run("s", spin)
    assert s["status"] == "timeout" and s["seconds"] < 3


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message printed without CUDA")
def test_without_cuda_it_stops_with_one_line():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", "/dev/null"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "no CUDA device" in lines[0] and "--cpu-smoke" in lines[0]


def test_master_weights_are_fp32_where_they_fit_an_h200_and_bf16_for_qwen_image(monkeypatch):
    gc = _load()
    from models.real_transformers import FAMILIES

    free = 138 * 2**30                                   # an idle H200 (139 GiB) with a CUDA context
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free, 139 * 2**30))
    cuda = torch.device("cuda", 0)
    chosen = {name: gc.choose_param_dtype(cuda, fam.count_parameters(fam.config))[0]
              for name, fam in FAMILIES.items()}
    known = {"flux": torch.float32, "sd35m": torch.float32, "qwenimage": torch.bfloat16, "wan2.1": torch.float32}
    assert {name: chosen[name] for name in known} == known
    assert gc.choose_param_dtype(torch.device("cpu"), 10**12)[0] == torch.float32


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
