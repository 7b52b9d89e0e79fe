#!/usr/bin/env python
"""GPU check: exercises rewardflow's CUDA paths on one GPU within a fixed budget (8 minutes), for the rare occasions a
GPU is at hand; nothing here runs in CI except its CPU smoke mode.

Sections, in order, each with a share of the budget:

``env``
    torch / CUDA / cuDNN / NCCL / driver versions, the device, its memory. Without CUDA the check stops at once with a
    one-line message (unless ``--cpu-smoke``).
``bf16``
    For each family (flux, sd35m, qwenimage, wan2.1): the **transformer only**, at its published size with random
    weights, built directly on the GPU (``models/real_transformers.py`` holds the configs with their sources:
    FLUX.1-dev from black-forest-labs/flux ``src/flux/util.py`` and diffusers ``scripts/convert_flux_to_diffusers.py``;
    SD3.5-Medium from stabilityai/stable-diffusion-3.5-medium ``transformer/config.json`` and diffusers
    ``scripts/convert_sd3_to_diffusers.py``; Qwen-Image from Qwen/Qwen-Image ``transformer/config.json``, diffusers'
    documented defaults; Wan2.1-T2V-1.3B from diffusers ``scripts/convert_wan_to_diffusers.py``);
    forward, and forward + backward of the velocity under bf16 autocast with gradient checkpointing (as the real
    model YAMLs), at the project's training resolution (512x512; Wan2.1 480x832 with 33 frames instead of the
    recipe's 81, a fifth of the attention cost: ``--wan-frames 81`` measures the recipe) with synthetic text
    embeddings and true CFG as 2 rows where the family uses it. Master weights are fp32 (the project's GPU
    precision) when fp32 weights, fp32 gradients and the autocast copies fit in free memory, else bf16 (Qwen-Image's
    20.4 B parameters: 2 x 82 GB in fp32); an fp32 attempt that runs out of memory is retried in bf16. Reports build
    time, forward and forward + backward seconds (medians), peak memory, gradient norm.
``fsdp``
    A 1-rank NCCL process group (one GPU: NCCL refuses two ranks on one device), FLUX.1-dev at full width and
    reduced depth (4 double + 8 single blocks, 2.5 B parameters: AdamW's fp32 states for all 57 blocks, 190 GB, do
    not fit one GPU) sharded by the project's ``FluxBackbone.shard_transformer`` (``fully_shard`` per block, params
    bf16 / reduce fp32, activation checkpointing), two AdamW steps (the project's optimizer defaults): loss finite, parameters
    changed, step time and peak memory.
``bench_jagg``, ``bench_flash``, ``bench_eam``
    The method benches (``scripts/bench_*.py``) in subprocesses, on the GPU with the FLUX twin at FLUX.1-dev's block
    width (``--config wide``: 24 heads x 128, 2 double + 4 single blocks, 1.3 B parameters, 1024 image tokens), with
    round counts small enough for about a minute each; their final JSON lines are collected, their whole output
    written to ``<out stem>_logs/<bench>.log`` beside ``--out``.

Time guard: the budget counts from the start of the process. Each section gets the time left times its planned share
over the shares of the sections still to run, so time a section does not use goes to the next ones; a section whose
share is below its minimum is skipped (saying so), and one that overruns its share is stopped (in-process sections by
an alarm, benches by a subprocess timeout) and marked ``timeout``. Families in ``bf16`` share that section's time the
same way.

The last line printed is one JSON object, section -> dict (``status`` ok / skipped / timeout / error / incomplete,
``seconds``, figures), also written to ``--out``; the exit code is 0 only when every section is ok.

    .venv/bin/python scripts/gpu_check.py                        # on a GPU machine: ~8 min, writes gpu_check.json
    .venv/bin/python scripts/gpu_check.py --sections bf16 --families wan2.1 --wan-frames 81
    .venv/bin/python scripts/gpu_check.py --cpu-smoke            # the same code on the CPU at tiny widths (~30 s)

``--cpu-smoke`` runs every section on the CPU: the tiny twins' transformer widths, gloo instead of NCCL, bf16
autocast (supported on CPU, only slow) in ``bf16`` and the CPU's fp32 policy in ``fsdp``, the benches with
``--device cpu --config tiny`` and a round each. ``tests/test_gpu_check.py`` runs it so the script cannot rot.
"""
from __future__ import annotations

import time

T0 = time.monotonic()          # the budget counts from here: imports are part of the 8 minutes

import argparse  # noqa: E402
import datetime  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import signal  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import traceback  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Callable  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", WANDB_MODE="disabled",
                  HF_HUB_DISABLE_PROGRESS_BARS="1", TOKENIZERS_PARALLELISM="false")

import torch  # noqa: E402

SECTIONS = ("bf16", "fsdp", "bench_jagg", "bench_flash", "bench_eam")
FAMILY_NAMES = ("flux", "sd35m", "qwenimage", "wan2.1")
MARGIN_S = 3.0                 # kept back from the budget for writing the results


def say(msg: str) -> None:
    print(msg, flush=True)


# ------------------------------------------------------------------------------------------------------ profiles
@dataclass(frozen=True)
class Profile:
    """What a run measures and how its time is shared."""

    name: str
    device: str                                   # cuda | cpu
    tiny: bool                                    # tiny twin widths instead of the published configs
    budget_s: float                               # the whole check
    weights: dict[str, float]                     # planned seconds per section (shares of the time left)
    minimum: dict[str, float]                     # a section whose share is below this is skipped
    family_minimum_s: float                       # same for one family of ``bf16``
    reps: int                                     # timed repetitions per family, at most
    fsdp_depth: tuple[int, int] | None            # FLUX (double, single) blocks of ``fsdp``; None: the config's own
    bench_args: dict[str, list[str]] = field(default_factory=dict)


GPU = Profile(
    "gpu", "cuda", tiny=False, budget_s=480.0,
    weights=dict(bf16=150.0, fsdp=50.0, bench_jagg=80.0, bench_flash=80.0, bench_eam=80.0),
    minimum=dict(bf16=40.0, fsdp=20.0, bench_jagg=40.0, bench_flash=40.0, bench_eam=40.0),
    family_minimum_s=15.0, reps=3, fsdp_depth=(4, 8),
    # 1024 image tokens (128 px through the twin's 2x VAE, packed 2x2); the first bench writes the wide twin once
    # (5 GB) into $REWARDFLOW_CACHE, the others reuse it
    bench_args=dict(
        bench_jagg=["--device", "cuda", "--config", "wide", "--size", "128", "--samples", "4", "--rounds", "2",
                    "--warmup", "1", "--probe-reps", "2"],
        bench_flash=["--device", "cuda", "--config", "wide", "--size", "128", "--group-size", "4", "--prompts", "2",
                     "--micro-batch", "4", "--rounds", "2", "--warmup", "1"],
        bench_eam=["--parts", "cost", "--device", "cuda", "--config", "wide", "--size", "128", "--prompts", "2",
                   "--group", "2", "--rounds", "2", "--warmup", "1"]))

SMOKE = Profile(
    "cpu-smoke", "cpu", tiny=True, budget_s=240.0,
    weights=dict(GPU.weights), minimum={s: 5.0 for s in SECTIONS}, family_minimum_s=1.0, reps=2, fsdp_depth=None,
    bench_args=dict(
        bench_jagg=["--device", "cpu", "--config", "tiny", "--size", "32", "--samples", "2", "--rounds", "1",
                    "--warmup", "0", "--probe-reps", "1"],
        bench_flash=["--device", "cpu", "--config", "tiny", "--size", "32", "--group-size", "2", "--prompts", "1",
                     "--micro-batch", "2", "--sampling-steps", "6", "--rounds", "1", "--warmup", "0"],
        bench_eam=["--parts", "cost", "--device", "cpu", "--config", "tiny", "--size", "32", "--prompts", "1",
                   "--group", "2", "--rounds", "1", "--warmup", "0"]))


# -------------------------------------------------------------------------------------------------- time guard
class Overrun(BaseException):
    """Raised by the alarm of an expired :class:`Deadline`. A BaseException, so that library code catching
    ``Exception`` cannot swallow it."""

    def __init__(self, deadline: "Deadline"):
        super().__init__(f"deadline of {deadline.seconds:.0f} s passed")
        self.deadline = deadline


class Deadline:
    """``with Deadline(s) as d: ...`` stops the block after ``s`` seconds (SIGALRM, main thread); ``d.expired`` then
    says so. Deadlines nest: the alarm is set for the earliest, and an inner block stopped by an outer deadline
    passes the stop on to it. The outermost one puts back the SIGALRM handler and timer it found (e.g.
    pytest-timeout's), counting down the time spent."""

    _stack: list["Deadline"] = []
    _saved: tuple = ()                    # (handler, seconds left on the timer, interval, when saved)

    def __init__(self, seconds: float):
        self.seconds = max(0.0, float(seconds))
        self.expiry = 0.0
        self.expired = False
        self.closing = False

    def __enter__(self) -> "Deadline":
        self.expiry = time.monotonic() + self.seconds
        if not Deadline._stack:
            left, interval = signal.getitimer(signal.ITIMER_REAL)
            Deadline._saved = (signal.getsignal(signal.SIGALRM), left, interval, time.monotonic())
            signal.signal(signal.SIGALRM, Deadline._on_alarm)
        Deadline._stack.append(self)
        Deadline._arm()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        self.closing = True                   # an alarm from now on no longer stops this block
        Deadline._stack.remove(self)
        Deadline._arm()
        if not Deadline._stack:
            handler, left, interval, since = Deadline._saved
            signal.signal(signal.SIGALRM, handler)
            if left > 0:
                signal.setitimer(signal.ITIMER_REAL, max(left - (time.monotonic() - since), 1e-3), interval)
        if exc_type is Overrun and exc.deadline is self:
            self.expired = True
            return True
        return False

    @staticmethod
    def _arm() -> None:
        if Deadline._stack:
            left = min(d.expiry for d in Deadline._stack) - time.monotonic()
            signal.setitimer(signal.ITIMER_REAL, max(left, 1e-3))
        else:
            signal.setitimer(signal.ITIMER_REAL, 0)

    @staticmethod
    def _on_alarm(signum, frame) -> None:
        now = time.monotonic()
        due = [d for d in Deadline._stack if d.expiry <= now + 1e-3 and not d.closing]
        if not due:                       # woke early: wait for the earliest again
            Deadline._arm()
            return
        raise Overrun(due[0])             # the outermost expired block: everything inside it unwinds


def run_guarded(res: dict, seconds: float, fn: Callable[[], None]) -> None:
    """``fn()`` within ``seconds``, recorded in ``res``: an exception becomes status ``error`` (with the traceback's
    tail), an overrun ``timeout``; otherwise ``ok`` unless ``fn`` set a status itself; ``seconds`` is the time taken.
    Figures ``fn`` wrote before it stopped stay in ``res``."""
    t0 = time.monotonic()
    d = Deadline(seconds)
    try:
        with d:
            try:
                fn()
            except Exception as e:   # noqa: BLE001 - a failing part is reported, the next ones still run
                res.update(status="error", error=f"{type(e).__name__}: {e}"[:2000],
                           traceback=traceback.format_exc()[-3000:])
    except Overrun as e:                      # the alarm landed in the instant the block was closing
        if e.deadline is not d:
            raise
        d.expired = True
    if d.expired:
        res.update(status="timeout", reason=f"stopped at its {seconds:.0f} s share")
    res.setdefault("status", "ok")
    res["seconds"] = round(time.monotonic() - t0, 2)


class SectionRunner:
    """Runs the sections in order, each within its share of what is left of the budget (module docstring)."""

    def __init__(self, budget_s: float, order: list[str], weights: dict[str, float], minimum: dict[str, float],
                 start: float = T0):
        self.budget_s, self.order, self.weights, self.minimum, self.start = budget_s, order, weights, minimum, start

    def left(self) -> float:
        return self.budget_s - MARGIN_S - (time.monotonic() - self.start)

    def share(self, name: str) -> float:
        rest = self.order[self.order.index(name):]
        return max(0.0, self.left()) * self.weights[name] / sum(self.weights[s] for s in rest)

    def run(self, name: str, fn: Callable[[dict, float], None]) -> dict:
        share = self.share(name)
        res: dict = {"allowance_s": round(share, 1)}
        if share < self.minimum[name]:
            res.update(status="skipped",
                       reason=f"{max(0.0, self.left()):.0f} s of the {self.budget_s:.0f} s budget left: its share "
                              f"{share:.0f} s < the {self.minimum[name]:.0f} s it needs")
            say(f"[{name}] skipped: {res['reason']}")
            return res
        say(f"[{name}] start ({share:.0f} s allowed)")
        run_guarded(res, share, lambda: fn(res, share))
        say(f"[{name}] {res['status']} in {res['seconds']:.1f} s")
        return res


# ---------------------------------------------------------------------------------------------------- helpers
def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(device: torch.device, fn: Callable[[], object]) -> tuple[float, object]:
    """Seconds of ``fn()`` with the device's queued work counted (synchronised before and after)."""
    sync(device)
    t0 = time.perf_counter()
    out = fn()
    sync(device)
    return time.perf_counter() - t0, out


def free_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def peak_gib(device: torch.device) -> float | None:
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def grad_norm(params: list[torch.nn.Parameter]) -> float:
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return float("nan")
    norm = torch.nn.utils.get_total_norm(grads)
    return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)   # DTensor under FSDP2


@dataclass
class Check:
    """One run's settings, shared by the sections."""

    profile: Profile
    device: torch.device
    families: list[str]
    wan_frames: int | None
    reps: int
    log_dir: Path

    @property
    def autocast_dtype(self) -> torch.dtype:
        return torch.bfloat16


# -------------------------------------------------------------------------------------------------------- env
def _nccl_version() -> str | None:
    try:
        v = torch.cuda.nccl.version()
    except (AttributeError, RuntimeError):
        return None
    return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)


def env_report(device: torch.device) -> dict:
    import diffusers
    import transformers

    out = {"status": "ok", "python": platform.python_version(), "torch": torch.__version__,
           "torch_cuda_build": torch.version.cuda, "diffusers": diffusers.__version__,
           "transformers": transformers.__version__, "cpu_cores": os.cpu_count(),
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    if device.type != "cuda":
        out["device"] = "cpu"
        return out
    props = torch.cuda.get_device_properties(device)
    free, total = torch.cuda.mem_get_info(device)
    out.update(device=props.name, capability=f"{props.major}.{props.minor}", device_count=torch.cuda.device_count(),
               total_gib=round(total / 2**30, 2), free_gib=round(free / 2**30, 2),
               multiprocessors=props.multi_processor_count, bf16_supported=torch.cuda.is_bf16_supported(),
               cudnn=torch.backends.cudnn.version(), nccl=_nccl_version(),
               sdpa={"flash": torch.backends.cuda.flash_sdp_enabled(),
                     "mem_efficient": torch.backends.cuda.mem_efficient_sdp_enabled(),
                     "cudnn": torch.backends.cuda.cudnn_sdp_enabled()})
    try:                                          # the driver is not visible through torch
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        out["driver"] = smi.stdout.strip().splitlines()[0] if smi.returncode == 0 and smi.stdout.strip() else None
    except (OSError, subprocess.TimeoutExpired):
        out["driver"] = None
    return out


# ------------------------------------------------------------------------------------------------------- bf16
def choose_param_dtype(device: torch.device, n_params: int) -> tuple[torch.dtype, str]:
    """fp32 master weights (the project's GPU setting) when fp32 weights + fp32 grads + autocast's bf16 weight copies
    (10 bytes a parameter) leave a tenth of the free memory for activations; else bf16 weights and grads."""
    if device.type != "cuda":
        return torch.float32, "fp32 on the CPU"
    free, _ = torch.cuda.mem_get_info(device)
    need = 10 * n_params
    if need <= 0.9 * free:
        return torch.float32, (f"fp32: {need / 2**30:.0f} GiB of weights, grads and bf16 copies fit in "
                               f"{free / 2**30:.0f} GiB free")
    return torch.bfloat16, (f"bf16: fp32 weights, grads and bf16 copies would take {need / 2**30:.0f} GiB of the "
                            f"{free / 2**30:.0f} GiB free")


def measure_family(chk: Check, name: str, res: dict, allowance: float) -> None:
    """Build ``name``'s transformer and time its velocity's forward and forward + backward (module docstring)."""
    from models.real_transformers import FAMILIES, with_frames

    fam = FAMILIES[name]
    tiny, device = chk.profile.tiny, chk.device
    cfg = fam.transformer_config(tiny)
    shape = fam.smoke_shape if tiny else fam.shape
    if name == "wan2.1" and chk.wan_frames and not tiny:
        shape = with_frames(shape, chk.wan_frames)
    n_params = fam.count_parameters(cfg)
    dtype, why = choose_param_dtype(device, n_params)
    res.update(params_b=round(n_params / 1e9, 4), rows=shape.rows, height=shape.height, width=shape.width,
               frames=shape.frames, image_tokens=fam.image_tokens(cfg, shape), text_tokens=shape.text_tokens,
               autocast="bf16", gradient_checkpointing=True)
    end = time.monotonic() + allowance
    try:
        _measure(chk, fam, cfg, shape, dtype, res, end)
        res["param_dtype_reason"] = why
        return
    except torch.cuda.OutOfMemoryError as e:
        if dtype != torch.float32:
            raise
        res["fp32_out_of_memory"] = str(e).splitlines()[0][:300]
    free_memory(device)                           # the failed attempt's frames are gone once the except has ended
    _measure(chk, fam, cfg, shape, torch.bfloat16, res, end)
    res["param_dtype_reason"] = "bf16: the fp32 attempt ran out of memory"


def _measure(chk: Check, fam, cfg: dict, shape, dtype: torch.dtype, res: dict, end: float) -> None:
    from models.real_transformers import velocity

    device, ac = chk.device, chk.autocast_dtype
    free_memory(device)
    reset_peak(device)
    build_s, model = timed(device, lambda: fam.build(cfg, device, dtype))
    model.enable_gradient_checkpointing()         # as conf/model/<family>.yaml for the real models
    model.train()
    params = list(model.parameters())
    inputs = fam.call_inputs(cfg, shape, device, ac)
    res.update(param_dtype=str(dtype).removeprefix("torch."), build_s=round(build_s, 3),
               params_gib=round(sum(p.numel() * p.element_size() for p in params) / 2**30, 3))

    def forward():
        with torch.no_grad():
            return velocity(model, inputs, ac)

    def forward_backward():
        v = velocity(model, inputs, ac)
        v.square().mean().backward()
        return v

    warm_fwd, v = timed(device, forward)          # first calls: kernel selection, allocator growth
    warm_fb, _ = timed(device, forward_backward)
    res.update(out_finite=bool(torch.isfinite(v).all()), out_shape=list(v.shape), grad_norm=grad_norm(params),
               warmup_fwd_s=round(warm_fwd, 4), warmup_fwd_bwd_s=round(warm_fb, 4))
    del v
    for p in params:
        p.grad = None
    per_rep = warm_fwd + warm_fb
    reps = max(1, min(chk.reps, int((end - time.monotonic() - 1.0) / max(per_rep, 1e-6))))
    fwd, fb = [], []
    for _ in range(reps):
        fwd.append(timed(device, forward)[0])
        fb.append(timed(device, forward_backward)[0])
        for p in params:
            p.grad = None
    fwd_s, fb_s = statistics.median(fwd), statistics.median(fb)
    res.update(reps=reps, fwd_s=round(fwd_s, 4), fwd_bwd_s=round(fb_s, 4), bwd_s=round(fb_s - fwd_s, 4),
               image_tokens_per_s_fwd_bwd=round(shape.rows * res["image_tokens"] / fb_s, 1),
               peak_gib=None if peak_gib(device) is None else round(peak_gib(device), 2))
    del model, params, inputs
    free_memory(device)


def section_bf16(chk: Check, res: dict, allowance: float) -> None:
    end = time.monotonic() + allowance
    for i, name in enumerate(chk.families):
        share = (end - time.monotonic()) / (len(chk.families) - i)
        fam_res: dict = {}
        res[name] = fam_res
        if share < chk.profile.family_minimum_s:
            fam_res.update(status="skipped", reason=f"its share {share:.0f} s < {chk.profile.family_minimum_s:.0f} s")
            say(f"  {name}: skipped ({fam_res['reason']})")
            continue
        run_guarded(fam_res, share, lambda: measure_family(chk, name, fam_res, share))
        free_memory(chk.device)
        figures = {k: fam_res.get(k) for k in ("param_dtype", "fwd_s", "fwd_bwd_s", "peak_gib")}
        say(f"  {name}: {fam_res['status']} in {fam_res['seconds']:.1f} s {figures}")
    if any(res[n]["status"] != "ok" for n in chk.families):
        res["status"] = "incomplete"


# ------------------------------------------------------------------------------------------------------- fsdp
def section_fsdp(chk: Check, res: dict, allowance: float) -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from launcher.trainer_config import OptimizerConfig
    from models.flux import FluxBackbone
    from models.parallelize import mixed_precision_policy
    from models.real_transformers import FAMILIES, velocity
    from rewardflow.dtypes import torch_dtype

    device, fam = chk.device, FAMILIES["flux"]
    cfg = fam.transformer_config(chk.profile.tiny)
    if chk.profile.fsdp_depth is not None:
        cfg.update(num_layers=chk.profile.fsdp_depth[0], num_single_layers=chk.profile.fsdp_depth[1])
    shape = fam.smoke_shape if chk.profile.tiny else fam.shape
    compute = torch_dtype("auto", device.type)    # what FluxBackbone autocasts to on this device
    backend = "nccl" if device.type == "cuda" else "gloo"
    policy = mixed_precision_policy(device.type)
    res.update(backend=backend, world_size=1, double_blocks=cfg["num_layers"], single_blocks=cfg["num_single_layers"],
               image_tokens=fam.image_tokens(cfg, shape), text_tokens=shape.text_tokens,
               param_dtype=str(policy.param_dtype or torch.float32).removeprefix("torch."),
               reduce_dtype=str(policy.reduce_dtype or torch.float32).removeprefix("torch."),
               autocast=str(compute).removeprefix("torch."))
    free_memory(device)
    reset_peak(device)
    with tempfile.TemporaryDirectory() as tmp:
        extra = {"device_id": device} if backend == "nccl" else {}
        dist.init_process_group(backend, init_method=f"file://{tmp}/rendezvous", rank=0, world_size=1, **extra)
        try:
            mesh = init_device_mesh(device.type, (1,))
            build_s, model = timed(device, lambda: fam.build(cfg, device))     # fp32 master weights
            shard_s, _ = timed(device, lambda: FluxBackbone.shard_transformer(model, mesh, mp_policy=policy,
                                                                              activation_checkpointing=True))
            params = list(model.parameters())
            o = OptimizerConfig()
            opt = torch.optim.AdamW(params, lr=o.lr, betas=tuple(o.betas), weight_decay=o.weight_decay, eps=o.eps)
            inputs = fam.call_inputs(cfg, shape, device, compute)
            target = torch.randn(shape.rows, res["image_tokens"], cfg["in_channels"],
                                 generator=torch.Generator().manual_seed(1)).to(device)
            last = cfg["num_single_layers"] - 1
            watched = {n: p.to_local().detach().clone() for n, p in model.named_parameters()
                       if n.startswith(("x_embedder.", "transformer_blocks.0.", f"single_transformer_blocks.{last}.",
                                        "proj_out."))}

            def step() -> tuple[float, float]:
                loss = (velocity(model, inputs, compute) - target).square().mean()
                loss.backward()
                norm = grad_norm(params)
                opt.step()
                opt.zero_grad(set_to_none=True)
                return float(loss.detach()), norm

            first_s, (loss1, norm1) = timed(device, step)       # includes FSDP's lazy init and AdamW's state
            changed = {n: float((p.to_local().detach() - watched[n]).abs().max())
                       for n, p in model.named_parameters() if n in watched}
            step_s, (loss2, norm2) = timed(device, step)
            res.update(params_b=round(sum(p.numel() for p in params) / 1e9, 4), build_s=round(build_s, 3),
                       shard_s=round(shard_s, 3), first_step_s=round(first_s, 4), step_s=round(step_s, 4),
                       losses=[loss1, loss2], grad_norms=[norm1, norm2],
                       loss_finite=all(math.isfinite(x) for x in (loss1, loss2)),
                       params_changed=all(v > 0 for v in changed.values()),
                       watched_tensors=len(changed), max_abs_update=max(changed.values()),
                       peak_gib=None if peak_gib(device) is None else round(peak_gib(device), 2))
            del model, params, opt, inputs, target, watched
        finally:
            dist.destroy_process_group()
    free_memory(device)


# ----------------------------------------------------------------------------------------------------- benches
def section_bench(chk: Check, name: str, res: dict, allowance: float) -> None:
    """``scripts/<name>.py`` in a subprocess stopped a second before the share ends; its last JSON line is the
    result, its whole output goes to ``<log_dir>/<name>.log``."""
    cmd = [sys.executable, str(ROOT / "scripts" / f"{name}.py"), *chk.profile.bench_args[name]]
    log = chk.log_dir / f"{name}.log"
    res.update(command=" ".join(["scripts/" + Path(cmd[1]).name, *cmd[2:]]), log=str(log))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              errors="replace", timeout=max(1.0, allowance - 1.0))
        output, rc = proc.stdout, proc.returncode
    except subprocess.TimeoutExpired as e:
        output = e.output.decode(errors="replace") if isinstance(e.output, bytes) else (e.output or "")
        log.write_text(output)
        res.update(status="timeout", reason=f"stopped at its {allowance:.0f} s share", tail=output[-1500:])
        return
    log.write_text(output)
    res["returncode"] = rc
    found = None
    for line in reversed(output.strip().splitlines()):
        if line.startswith("{"):
            try:
                found = json.loads(line)
                break
            except json.JSONDecodeError:
                continue
    if rc != 0 or found is None:
        res.update(status="error", error=f"exit code {rc}" + ("" if found else ", no JSON line"),
                   tail=output[-1500:])
        return
    res["result"] = found


# ---------------------------------------------------------------------------------------------------------- main
def finite_json(value):
    """NaN / inf become null (strict JSON); the test then sees a missing figure instead of a parse error."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(v) for v in value]
    return value


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cpu-smoke", action="store_true", help="the same sections on the CPU at tiny widths")
    p.add_argument("--out", default="gpu_check.json", help="where the JSON goes (bench logs beside it)")
    p.add_argument("--budget-s", type=float, default=None, help="whole-check budget (default 480; smoke 240)")
    p.add_argument("--sections", default=",".join(SECTIONS), help=f"comma list of {', '.join(SECTIONS)}")
    p.add_argument("--families", default=",".join(FAMILY_NAMES), help="bf16 section: comma list of families")
    p.add_argument("--wan-frames", type=int, default=None, help="bf16 section: Wan2.1 frames (4k + 1; default 33)")
    p.add_argument("--reps", type=int, default=None, help="bf16 section: timed repetitions per family, at most")
    args = p.parse_args(argv)

    if not args.cpu_smoke and not torch.cuda.is_available():
        print(f"gpu_check: no CUDA device (torch {torch.__version__}, CUDA build {torch.version.cuda}, "
              f"torch.cuda.is_available() is False): run it on a GPU machine, or pass --cpu-smoke for the CPU smoke "
              f"run", file=sys.stderr)
        return 2
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    families = [f.strip() for f in args.families.split(",") if f.strip()]
    unknown = sorted(set(sections) - set(SECTIONS)) + sorted(set(families) - set(FAMILY_NAMES))
    if args.wan_frames is not None and (args.wan_frames < 1 or (args.wan_frames - 1) % 4):
        p.error(f"--wan-frames must be 4k + 1 (1, 5, ..., 81), got {args.wan_frames}")
    if unknown:
        p.error(f"unknown section or family: {', '.join(unknown)} (sections: {', '.join(SECTIONS)}; families: "
                f"{', '.join(FAMILY_NAMES)})")
    profile = SMOKE if args.cpu_smoke else GPU
    budget = args.budget_s if args.budget_s is not None else profile.budget_s
    device = torch.device(profile.device)
    if device.type == "cuda":                     # an explicit index: NCCL's device_id and set_device need one
        device = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(device)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    log_dir = out.parent / f"{out.stem}_logs"
    log_dir.mkdir(exist_ok=True)
    chk = Check(profile, device, families, args.wan_frames, args.reps or profile.reps, log_dir)

    results: dict = {"env": env_report(device)}
    env = results["env"]
    say(f"[env] torch {env['torch']} (CUDA build {env['torch_cuda_build']}), device {env['device']}"
        + (f", {env['free_gib']} of {env['total_gib']} GiB free, driver {env['driver']}" if device.type == "cuda"
           else ""))
    runner = SectionRunner(budget, sections, {s: profile.weights[s] for s in sections},
                           {s: profile.minimum[s] for s in sections})
    bodies: dict[str, Callable[[dict, float], None]] = {
        "bf16": lambda r, a: section_bf16(chk, r, a),
        "fsdp": lambda r, a: section_fsdp(chk, r, a),
        **{b: (lambda r, a, b=b: section_bench(chk, b, r, a)) for b in ("bench_jagg", "bench_flash", "bench_eam")},
    }
    for name in sections:
        results[name] = runner.run(name, bodies[name])
    ok = all(results[s]["status"] == "ok" for s in sections)
    results["check"] = {"profile": profile.name, "budget_s": budget, "elapsed_s": round(time.monotonic() - T0, 2),
                        "sections": sections, "ok": ok, "date": env["date"]}
    line = json.dumps(finite_json(results), sort_keys=False)
    out.write_text(line + "\n")
    print(line, flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
