"""Section ``trainer`` (issue 27, item 7b): rewardflow's trainer, DanceGRPO with LoRA and with full fine-tuning, on
the FLUX.1 architecture at published block width (24 heads x 128, ``flux_bench_models.CONFIGS["wide"]``) with as
many blocks as the memory plan fits on this GPU, at FLUX.1's 720^2 token count, for 3 steps and a resumed one:

* step 0, FLOPs counted (``trainer_runs.counted_step``): executed FLOPs in the transformer's calls, per phase;
* step 1, host syncs counted (``trainer_runs.synced_step``), then a DCP checkpoint of it;
* step 2, plain: the trainer's synchronised phase seconds and measured peak memory per phase beside the plan's
  (``time/*``, ``memory/*``: docs/metrics.md), the first-update ratio distribution (``health/first_update_*``);
* the run rebuilt from the checkpoint (``trainer.resume``) trains step 2 again: loss and weights as before.

MFU is the transformer's executed FLOPs (activation-checkpointing recompute included) per synchronised second,
over the datasheet's dense bf16 peak (``spec_peaks.py``) and over the matmul ceiling measured in this run. On the
CPU (the rehearsal) the same code runs at the tiny twin's width; what needs CUDA is printed as a labelled stand-in:
memory from the plan only, MFU against the measured CPU matmul ceiling, the spec peak "n/a on CPU".

The weights are random and built on the device (``random_transformer.py``): costs do not depend on their values.
"""

from __future__ import annotations

import time

import torch

from gpu_measure.ceilings import matmul_tflops
from gpu_measure.profile import Check
from gpu_measure.random_transformer import config_only_folder, random_transformers
from gpu_measure.record import Recorder
from gpu_measure.spec_peaks import mfu, spec_peak_tflops
from gpu_measure.trainer_report import print_mode
from gpu_measure.trainer_runs import (
    PHASES,
    build_trainer,
    close,
    compose_cfg,
    counted_step,
    digest,
    digest_rel_diff,
    reopen,
    save_checkpoint,
    synced_step,
)

GiB = float(2**30)
FIRST_UPDATE_KEYS = ("dev_mean", "dev_p50", "dev_p90", "dev_p99", "dev_max")


def transformer_config(chk: Check, doubles: int) -> dict:
    from flux_bench_models import CONFIGS

    return {**CONFIGS[chk.profile.trainer_width], "num_layers": doubles, "num_single_layers": 2 * doubles}


def overrides(chk: Check, folder, mode: str) -> list[str]:
    p = chk.profile
    return [
        "model=tiny_flux",
        f"model.path={folder}",
        f"model.device={chk.device.type}",
        f"model.finetune={mode}",
        f"model.height={p.trainer_size}",
        f"model.width={p.trainer_size}",
        f"model.max_sequence_length={p.trainer_text_len}",
        "model.activation_checkpointing=auto",
        "method=dance_grpo",
        *p.trainer_method,
        "reward=color",
        "logger=none",
        "trainer.steps=3",
        "trainer.seed=0",
        "trainer.sample_every=0",
        "trainer.ckpt_every=0",
        "trainer.progress=false",
        "trainer.memory_check=warn",  # the depth was chosen to fit: a refusal would only hide the measurement
        "eval.every=0",
    ]


def composed(chk: Check, doubles: int, mode: str):
    """The run's config at ``doubles`` double blocks (and twice as many single ones), its learning rate the
    method's recipe for ``mode`` (the twin's CPU-demo rate is for a randomly initialised toy)."""
    folder = config_only_folder(
        chk.work_dir / "models" / f"flux-{chk.profile.trainer_width}-{doubles}", transformer_config(chk, doubles)
    )
    cfg = compose_cfg(overrides(chk, folder, mode))
    cfg.optimizer.lr = float(cfg.method.recipe_lr[mode])
    return cfg


def planned(cfg, gpu_gb: float):
    from omegaconf import OmegaConf

    from launcher.plan.fixes import plan_with_fixes

    container = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(container, dict)
    return plan_with_fixes(container, 1, gpu_gb), container


def fit_depth(chk: Check, mode: str, gpu_gb: float) -> int:
    """The most double blocks (up to the profile's) whose planned peak fits ``trainer_fill`` of ``gpu_gb``: the plan
    grows with the depth, so a bisection."""
    limit = chk.profile.trainer_fill * gpu_gb * GiB
    lo, hi = 0, chk.profile.trainer_max_double
    while lo < hi:
        mid = (lo + hi + 1) // 2
        plan, _ = planned(composed(chk, mid, mode), gpu_gb)
        if plan is not None and plan.peak <= limit:
            lo = mid
        else:
            hi = mid - 1
    if lo == 0:
        raise RuntimeError(f"not even 1 + 2 blocks fit {chk.profile.trainer_fill:.0%} of {gpu_gb:.0f} GiB")
    return lo


def ceiling(chk: Check, dtype: torch.dtype) -> float:
    """The measured matmul ceiling in the run's compute dtype (``ceilings``' bf16 figure where it ran)."""
    if dtype == torch.bfloat16 and chk.ceiling_tflops:
        return chk.ceiling_tflops
    return matmul_tflops(chk.device, chk.profile.matmul_n, dtype=dtype)


def first_update(metrics: dict) -> dict:
    found = {k: metrics.get(f"health/first_update_ratio_{k}") for k in FIRST_UPDATE_KEYS}
    return {**found, "clip_frac": metrics.get("health/first_update_clip_frac")}


def memory(chk: Check, metrics: dict, plan) -> dict:
    """Measured (CUDA) and planned GiB per phase; the plan's figures without its CUDA allowance, as PhaseMemory
    logs them (launcher/tracking/phase_memory.py)."""
    out: dict = {"measured": None if chk.device.type != "cuda" else {}}
    if out["measured"] is not None:
        out["measured"] = {p: metrics.get(f"memory/{p}_peak_gib") for p in PHASES}
    if plan is not None:
        allowance = plan.overhead
        out["planned"] = {
            "rollout": (plan.phase("rollout") - allowance) / GiB,
            "update": (plan.phase("update") - allowance) / GiB,
            "peak": (plan.peak - allowance) / GiB,
        }
        out["plan_choices"] = dict(plan.choices)
    return out


def run_mode(chk: Check, mode: str, gpu_gb: float) -> dict:
    from launcher.plan.checkpoint_size import checkpoint_bytes

    doubles = fit_depth(chk, mode, gpu_gb)
    cfg = composed(chk, doubles, mode)
    plan, container = planned(cfg, gpu_gb)
    ckpt_gb = checkpoint_bytes(container) / 1e9
    run_dir = chk.work_dir / "runs" / f"trainer-{mode}"
    t0 = time.perf_counter()
    with random_transformers(chk.device):
        trainer = build_trainer(cfg, run_dir)
    build_s = time.perf_counter() - t0
    params = sum(p.numel() for p in trainer.backbone.transformer.parameters())
    trainable = sum(p.numel() for p in trainer.params)
    dtype = trainer.backbone.dtype
    m0, flops = counted_step(trainer, 0)
    m1, syncs = synced_step(trainer, 1)
    dcp: dict = {"planned_gb": ckpt_gb}
    if ckpt_gb <= chk.profile.dcp_max_gb:
        dcp.update(save_checkpoint(trainer, 1))
    else:
        dcp.update(status="skipped", reason=f"checkpoint {ckpt_gb:.0f} GB > {chk.profile.dcp_max_gb:.0f} GB allowed")
    m2 = trainer.train_step(2)
    after = digest(trainer)
    if "checkpoint" in dcp:
        close(trainer)
        with random_transformers(chk.device):
            trainer, dcp["reopen_s"] = reopen(cfg, run_dir)
        dcp["resumed_at"] = trainer.start_step
        again = trainer.train_step(2)
        dcp["loss_abs_diff"] = abs(float(again["loss"]) - float(m2["loss"]))
        dcp["reward_abs_diff"] = abs(float(again["reward/mean"]) - float(m2["reward/mean"]))
        dcp["weights_rel_diff"] = digest_rel_diff(digest(trainer), after)
        dcp["status"] = "ok"
    close(trainer)

    seconds = {p: m2.get(f"time/{p}_s") for p in (*PHASES, "step")}
    peak, peak_name = spec_peak_tflops(chk.device)
    top = ceiling(chk, dtype)
    phase_flop = {p: flops["phases"][p]["transformer"] for p in PHASES}
    step_flop = flops["transformer"]
    return {
        "mode": mode,
        "device": chk.device.type,
        "dtype": str(dtype).removeprefix("torch."),
        "blocks": [doubles, 2 * doubles],
        "params_b": params / 1e9,
        "trainable_b": trainable / 1e9,
        "image_tokens": (chk.profile.trainer_size // 4) ** 2,
        "text_tokens": chk.profile.trainer_text_len,
        "planned_against_gib": gpu_gb,
        "build_s": build_s,
        "memory": memory(chk, m2, plan),
        "seconds": seconds,
        "flop": {"step_total": flops["total"], "step_transformer": step_flop, "phase_transformer": phase_flop},
        "spec_peak_tflops": peak,
        "spec_peak_device": peak_name,
        "ceiling_tflops": top,
        "mfu_spec": mfu(step_flop, seconds["step"], peak),
        "mfu_ceiling": mfu(step_flop, seconds["step"], top),
        "mfu_phase_ceiling": {p: mfu(phase_flop[p], seconds[p], top) for p in PHASES},
        "mfu_phase_spec": {p: mfu(phase_flop[p], seconds[p], peak) for p in PHASES},
        "host_syncs": {**syncs, "counted_on": chk.device.type},
        "first_update": {f"step_{i}": first_update(m) for i, m in enumerate((m0, m1, m2))},
        "dcp": dcp,
        "loss": [float(m.get("loss", float("nan"))) for m in (m0, m1, m2)],
        "skipped_updates": sum(int(m["health/skipped_updates"]) for m in (m0, m1, m2)),
    }


def section_trainer(chk: Check, rec: Recorder, allowance: float) -> None:
    if chk.device.type == "cuda":
        gpu_gb = chk.profile.trainer_gpu_gb or torch.cuda.get_device_properties(chk.device).total_memory / GiB
    else:
        gpu_gb = chk.profile.trainer_gpu_gb or 80.0  # the plan's stand-in GPU (cluster.gpu_mem_gb's default)
    results = chk.report.setdefault("trainer", {})
    for mode in chk.profile.trainer_modes:
        t0 = time.monotonic()
        res = run_mode(chk, mode, gpu_gb)
        res["wall_s"] = time.monotonic() - t0
        results[mode] = res
        print_mode(res)
        rec.write(
            "trainer",
            f"dance_grpo {mode} flux width {res['blocks'][0]}+{res['blocks'][1]} blocks",
            seconds=res["seconds"]["step"],
            mfu=res["mfu_spec"] if res["mfu_spec"] is not None else res["mfu_ceiling"],
            peak_gib=(res["memory"]["measured"] or {}).get("update"),
            value=f"{res['params_b']:.2f} B params, host syncs {res['host_syncs']['total']}, dcp {res['dcp'].get('status')}",
            result=res,
        )
