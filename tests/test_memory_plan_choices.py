"""What the memory plan counts beyond the weights and activations (the EMA, the reward model before its first call,
fp32 normalisation outputs under autocast), the ``auto`` settings it decides (launcher/plan/choices.py), the check at
start and its override ``trainer.memory_check`` (launcher/plan/start_check.py), and the measured peaks logged beside
the plan (launcher/tracking/phase_memory.py); docs/memory.md."""

from __future__ import annotations

import logging
import re
import subprocess

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from conftest import ROOT, compose, rewardflow_cmd
from launcher.plan.choices import resolve_auto
from launcher.plan.fixes import plan_with_fixes
from launcher.plan.memory_plan import GiB, plan
from launcher.plan.start_check import check_at_start
from launcher.tracking.phase_memory import PhaseMemory
from rewardflow.distributed import World
from rewardflow.errors import ConfigError

EIGHT_GPUS = ["cluster=slurm", "cluster.gpus_per_node=8"]
FULL = ["model=flux", "model.finetune=full", "method=dance_grpo", *EIGHT_GPUS]
#: FLUX.1 LoRA at 720 x 720, 2 rows per training call: fits 80 GB without activation checkpointing
LORA_720 = [
    "model=flux",
    "method=dance_grpo",
    "method.update_batch=2",
    "model.height=720",
    "model.width=720",
    *EIGHT_GPUS,
]


def cfg_of(overrides: list[str]) -> dict:
    return OmegaConf.to_container(compose(overrides), resolve=True)


def lines(result) -> dict:
    return {line.what: line for line in result.lines}


def test_the_ema_adds_its_size_per_rank_and_twice_that_while_swapped_in():
    without, with_ema = (plan_with_fixes(cfg_of([*FULL, *extra])) for extra in ([], ["trainer.ema_decay=0.995"]))
    ema = 11.90e9 * 4 / 8  # FLUX.1's fp32 master weights, sharded over 8 ranks: ~5.5 GiB
    assert with_ema.choices == without.choices  # the same auto setting, so the difference is the EMA alone
    assert with_ema.peak - without.peak == pytest.approx(ema, rel=2e-3)
    swapped = plan(cfg_of([*FULL, "trainer.ema_decay=0.995", "eval.every=10", "eval.use_ema=true"]))
    line = lines(swapped)["EMA of the trainable weights (fp32)"]
    assert line.rollout == pytest.approx(2 * ema, rel=2e-3) and line.update == pytest.approx(ema, rel=2e-3)
    lora = lines(plan(cfg_of(["model=flux", "trainer.ema_decay=0.9", *EIGHT_GPUS])))
    assert lora["EMA of the trainable weights (fp32)"].update == lora["LoRA adapters (fp32)"].update


def test_plan_prints_a_larger_peak_with_an_ema():
    peaks = []
    for extra in ([], ["trainer.ema_decay=0.995"]):
        out = subprocess.run(
            [*rewardflow_cmd(), *FULL, *extra, "--plan"], capture_output=True, text=True, cwd=ROOT, check=True
        ).stdout
        peaks.append(float(re.search(r"peak ([\d.]+) GiB of", out).group(1)))
    assert peaks[1] - peaks[0] == pytest.approx(11.90e9 * 4 / 8 / GiB, abs=0.1)


def test_the_reward_model_is_fp32_until_its_first_call():
    reward = lines(plan(cfg_of([*FULL, "reward=hps"])))["reward model"]
    assert reward.rollout == pytest.approx(986.1e6 * 4) and reward.update == pytest.approx(986.1e6 * 2)
    fp32 = lines(plan(cfg_of([*FULL, "reward=hps", "reward.dtype=float32"])))["reward model"]
    assert fp32.rollout == fp32.update == pytest.approx(986.1e6 * 4)


def test_the_held_out_rewards_are_counted_where_the_run_evaluates():
    """A full-size model's default eval.rewards (aesthetic + CLIP diversity, two CLIP ViT-L/14) are on the device
    from the start: fp32 until their first call, bf16 after; none when the run does not evaluate, none for the CPU
    models' download-free ones, and an added one counts too."""
    held = lines(plan(cfg_of(FULL)))["held-out rewards (aesthetic, diversity)"]
    assert held.rollout == pytest.approx((428.5e6 + 427.6e6) * 4) and held.update == pytest.approx(856.1e6 * 2)
    assert not [n for n in lines(plan(cfg_of([*FULL, "eval.every=0"]))) if n.startswith("held-out")]
    assert not [n for n in lines(plan(cfg_of([*FULL, "eval_rewards@eval.rewards=offline"]))) if n.startswith("held")]
    more = lines(plan(cfg_of([*FULL, "+reward@eval.rewards.hps=hps"])))["held-out rewards (aesthetic, diversity, hps)"]
    assert more.update == pytest.approx((856.1e6 + 986.1e6) * 2)


def test_norm_outputs_count_under_bf16_autocast_only():
    bf16 = lines(plan(cfg_of([*FULL, "model.activation_checkpointing=none"])))
    norms = bf16["training call: fp32 norm outputs (autocast)"].update
    assert 0.05 < norms / bf16["training call: activations"].update < 0.2, norms
    fp32 = lines(plan(cfg_of([*FULL, "model.activation_checkpointing=none", "model.dtype=float32"])))
    assert fp32["training call: fp32 norm outputs (autocast)"].update == 0.0
    full = lines(plan(cfg_of([*FULL, "model.activation_checkpointing=full"])))
    assert full["training call: fp32 norm outputs (autocast)"].update < norms / 10  # one recomputed block's


def test_auto_checkpointing_is_the_cheapest_that_fits():
    lora = plan_with_fixes(cfg_of(LORA_720))
    assert lora.choices == {"model.activation_checkpointing": "none"} and lora.fits
    assert "auto: model.activation_checkpointing=none (the cheapest within 80 GiB less 10%" in lora.table()
    explicit = plan(cfg_of([*LORA_720, "model.activation_checkpointing=none"]))
    assert explicit.peak == lora.peak
    full = plan_with_fixes(cfg_of(FULL))  # full fine-tuning at 8 rows: only full checkpointing fits
    assert full.choices == {"model.activation_checkpointing": "full"} and full.fits
    assert "cheaper but over it: none" in full.table()
    nothing = plan_with_fixes(cfg_of([*FULL, "cluster.gpu_mem_gb=10"]))
    assert nothing.choices == {"model.activation_checkpointing": "full"} and not nothing.fits
    assert "none within 10 GiB: the most frugal" in nothing.table() and nothing.fixes
    # set by hand, nothing is decided
    assert resolve_auto(cfg_of([*FULL, "model.activation_checkpointing=every_k"])).choices == {}


def test_auto_text_encoders_stay_on_the_device_when_they_fit():
    roomy = plan_with_fixes(cfg_of([*LORA_720, "model.text_encoders=auto"]))
    assert roomy.choices["model.text_encoders"] == "device" and "text encoders" in lines(roomy)
    # at 40 GB the encoders (9.1 GiB) do not fit beside un-checkpointed activations: offloaded, no recompute added
    tight = resolve_auto(cfg_of([*LORA_720, "model.text_encoders=auto"]), gpu_gb=40)
    assert tight.choices == {"model.activation_checkpointing": "none", "model.text_encoders": "offload"}


def test_plan_says_what_auto_chose():
    out = subprocess.run(
        [*rewardflow_cmd(), *LORA_720, "--plan"], capture_output=True, text=True, cwd=ROOT, check=True
    ).stdout
    assert (
        "auto: model.activation_checkpointing=none (the cheapest within 80 GiB less 10%" in out
        and "0% of blocks" in out
    )


def test_the_run_builds_the_model_with_the_plans_choice():
    start = check_at_start(compose(LORA_720), World(0, 8), gpu_gb=80.0)
    assert str(start.model.activation_checkpointing) == "none" and start.on_gpu
    assert start.plan is not None and start.plan.choices == {"model.activation_checkpointing": "none"}
    assert str(compose(LORA_720).model.activation_checkpointing) == "auto"  # the run's own config is unchanged
    cpu = check_at_start(compose(["model=tiny_flux"]), World())  # nothing to decide on the CPU: no plan
    assert cpu.plan is None and not cpu.on_gpu


def test_memory_check_error_refuses_warn_starts_off_skips(caplog):
    too_big = [*FULL, "cluster.gpu_mem_gb=10"]
    with pytest.raises(ConfigError, match="does not fit.*trainer.memory_check=warn"):
        check_at_start(compose(too_big), World(0, 8), gpu_gb=10.0)
    with caplog.at_level(logging.INFO, logger="launcher.plan.start_check"):
        warned = check_at_start(compose([*too_big, "trainer.memory_check=warn"]), World(0, 8), gpu_gb=10.0)
    assert not warned.plan.fits
    assert any(r.levelno == logging.WARNING and "starting anyway" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="launcher.plan.start_check"):
        off = check_at_start(compose([*too_big, "trainer.memory_check=off"]), World(0, 8), gpu_gb=10.0)
    assert off.plan is not None and not any("DOES NOT FIT" in r.getMessage() for r in caplog.records)
    assert str(off.model.activation_checkpointing) == "full"  # auto is still decided


def test_a_bad_memory_check_fails_at_composition_naming_the_key():
    with pytest.raises(ConfigCompositionException) as err:
        compose(["trainer.memory_check=sometimes"])
    message = str(err.value) + str(err.value.__cause__)
    assert "memory_check" in message and all(v in message for v in ("error", "warn", "off"))


def test_measured_peaks_per_phase_sit_beside_the_plan():
    assert PhaseMemory(plan(cfg_of(LORA_720))).metrics() == {}  # the CPU: nothing measured
    allocated = iter([3 * GiB, 5 * GiB, 4 * GiB])
    resets = []
    memory = PhaseMemory(plan(cfg_of(LORA_720)), reset=lambda: resets.append(1), peak=lambda: next(allocated))
    for phase in ("rollout", "rollout", "update"):
        with memory(phase):
            pass
    m = memory.metrics()
    assert len(resets) == 3 and m["memory/rollout_peak_gib"] == 5.0 and m["memory/update_peak_gib"] == 4.0
    planned = plan(cfg_of(LORA_720))
    assert m["memory/planned_peak_gib"] == pytest.approx((planned.peak - planned.overhead) / GiB)
    assert "memory/rollout_peak_gib" not in memory.metrics()  # per step
