"""What a GPU check run measures and how its time is shared: the GPU profile (published sizes on one H200, one device
command of at most 9 minutes) and the CPU smoke profile (the same code at toy sizes, for the rehearsal in CI).

The sections run in this order, most valuable first, so that a run cut short loses only the tail: the two ceilings
the other figures are read against; the trainer itself (issue 27, item 7): the tiny twins on CUDA vs the CPU
(``equality``) and DanceGRPO at FLUX.1's width (``trainer``); each family's transformer (the cost of every method's
passes); FSDP2's overhead; the reward path's VAE decode and ViT-H tower; the method benches' ratios; compiled blocks
(optional). The REHEARSAL profile runs the first three on the CPU at tiny sizes (the CI test), SMOKE all of them.
"""

from __future__ import annotations

import dataclasses
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import torch

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
FAMILY_NAMES = ("flux", "sd35m", "wan2.1", "qwenimage")
# share of the families section each family gets, by its expected cost (Qwen-Image: 20 B parameters)
FAMILY_WEIGHTS = {"flux": 1.0, "sd35m": 0.5, "wan2.1": 1.0, "qwenimage": 1.5}


@dataclass(frozen=True)
class Profile:
    name: str
    device: str  # cuda | cpu
    tiny: bool  # tiny twin widths instead of the published configs
    budget_s: float  # the whole check, imports included
    weights: dict[str, float]  # planned seconds per section (shares of the time left)
    minimum: dict[str, float]  # a section whose share is below this is skipped
    family_minimum_s: float  # same for one family of ``families``
    reps: int  # timed repetitions per measurement, at most
    batched: dict[str, int]  # samples per transformer call at the batched size, per family
    matmul_n: int  # ceilings: the square bf16 matmul's side
    copy_mib: int  # ceilings: bytes per copy
    vae_latent_side: int  # vae: latent side (8 px per latent px: 64 -> 512 px)
    vae_batches: tuple[int, ...]
    tower_batch: int  # reward_tower: images per call
    compile_backend: str  # compile: torch.compile backend
    bench_args: dict[str, list[str]] = field(default_factory=dict)
    # equality: the twins trained from the same seed on each (device, dtype, tolerance name) and on the CPU in fp32
    equality_twins: tuple[str, ...] = ("tiny_flux",)
    equality_runs: tuple[tuple[str, str, str], ...] = (("cpu", "fp32", "exact"),)
    # trainer: DanceGRPO on the FLUX.1 architecture (flux_bench_models.CONFIGS[trainer_width]) at the most blocks
    # the plan fits (double blocks up to trainer_max_double, two single blocks per double one, as FLUX.1-dev's 19 + 38)
    trainer_width: str = "tiny"
    trainer_max_double: int = 2
    trainer_size: int = 16  # pixels through the twin's 4x (VAE 2x, packing 2x2): 180 -> 2025 tokens = FLUX.1 at 720^2
    trainer_text_len: int = 16  # T5 tokens per prompt (FLUX.1-dev: 512)
    trainer_modes: tuple[str, ...] = ("lora", "full")
    trainer_gpu_gb: float | None = None  # planned against this (None: the device's memory, or 80 GiB on the CPU)
    trainer_fill: float = 0.9  # the share of it the planned peak may take
    trainer_method: tuple[str, ...] = (  # the method's budget for the check (overrides)
        "method.group_size=2",
        "method.prompts_per_step=1",
        "method.sampling_steps=4",
        "method.updates_per_rollout=2",
        "method.update_batch=2",
    )
    dcp_max_gb: float = 1.0  # a checkpoint planned larger is not written (disk and minutes), the section says so
    default_sections: tuple[str, ...] = SECTIONS  # what runs without --sections


GPU = Profile(
    "gpu",
    "cuda",
    tiny=False,
    budget_s=480.0,
    weights=dict(
        ceilings=10,
        equality=60,
        trainer=170,
        families=140,
        fsdp=40,
        vae=15,
        reward_tower=15,
        bench_jagg=55,
        bench_flash=55,
        bench_eam=55,
        compile=40,
    ),
    minimum=dict(
        ceilings=5,
        equality=20,
        trainer=60,
        families=40,
        fsdp=20,
        vae=5,
        reward_tower=5,
        bench_jagg=30,
        bench_flash=30,
        bench_eam=30,
        compile=25,
    ),
    family_minimum_s=15.0,
    reps=3,
    # rows per call double with true CFG (SD3.5, Qwen-Image, Wan): 16, 8 and 4 rows; Wan's rows hold 14 040 tokens
    batched={"flux": 8, "sd35m": 8, "qwenimage": 4, "wan2.1": 2},
    matmul_n=8192,
    copy_mib=1024,
    vae_latent_side=64,
    vae_batches=(1, 8, 24),
    tower_batch=24,
    compile_backend="inductor",
    # 1024 image tokens (128 px through the twin's 2x VAE, packed 2x2); the first bench writes the wide twin once
    # (5 GB) into $REWARDFLOW_CACHE, the others reuse it
    bench_args=dict(
        bench_jagg=[
            "--device",
            "cuda",
            "--config",
            "wide",
            "--size",
            "128",
            "--samples",
            "4",
            "--rounds",
            "2",
            "--warmup",
            "1",
            "--probe-reps",
            "2",
        ],
        bench_flash=[
            "--device",
            "cuda",
            "--config",
            "wide",
            "--size",
            "128",
            "--group-size",
            "4",
            "--prompts",
            "2",
            "--micro-batch",
            "4",
            "--rounds",
            "2",
            "--warmup",
            "1",
        ],
        bench_eam=[
            "--parts",
            "cost",
            "--device",
            "cuda",
            "--config",
            "wide",
            "--size",
            "128",
            "--prompts",
            "2",
            "--group",
            "2",
            "--rounds",
            "2",
            "--warmup",
            "1",
        ],
    ),
    equality_twins=("tiny_flux", "tiny_sd35m"),  # the two twin VAEs' pre-training fits the share, not four
    equality_runs=(("cuda", "fp32", "fp32"), ("cuda", "bf16", "bf16")),
    trainer_width="wide",
    trainer_max_double=19,
    trainer_size=180,
    trainer_text_len=512,
    trainer_method=(
        "method.group_size=4",
        "method.prompts_per_step=1",
        "method.sampling_steps=8",
        "method.updates_per_rollout=2",
        "method.update_batch=4",
        "method.rollout_chunk=8",
    ),
    dcp_max_gb=20.0,
)

SMOKE = Profile(
    # a generous budget: on a loaded shared CPU the toy sizes take minutes of wall-clock, in CI about one
    "cpu-smoke",
    "cpu",
    tiny=True,
    budget_s=600.0,
    weights=dict(GPU.weights),
    minimum={s: 1.0 for s in SECTIONS},
    family_minimum_s=1.0,
    reps=1,
    batched={name: 2 for name in FAMILY_NAMES},
    matmul_n=256,
    copy_mib=16,
    vae_latent_side=8,
    vae_batches=(1, 8, 24),
    tower_batch=24,
    compile_backend="aot_eager",  # graph capture without a C++ toolchain; inductor is the GPU's
    bench_args=dict(
        bench_jagg=[
            "--device",
            "cpu",
            "--config",
            "tiny",
            "--size",
            "32",
            "--samples",
            "2",
            "--rounds",
            "1",
            "--warmup",
            "0",
            "--probe-reps",
            "1",
        ],
        bench_flash=[
            "--device",
            "cpu",
            "--config",
            "tiny",
            "--size",
            "32",
            "--group-size",
            "2",
            "--prompts",
            "1",
            "--micro-batch",
            "2",
            "--sampling-steps",
            "6",
            "--rounds",
            "1",
            "--warmup",
            "0",
        ],
        bench_eam=[
            "--parts",
            "cost",
            "--device",
            "cpu",
            "--config",
            "tiny",
            "--size",
            "32",
            "--prompts",
            "1",
            "--group",
            "2",
            "--rounds",
            "1",
            "--warmup",
            "0",
        ],
    ),
)


# the CI rehearsal of the trainer sections (tests/test_gpu_check_rehearsal.py): the same code on the CPU at tiny
# sizes, the twin compared with itself (exact), the planned memory standing in for the measured one
REHEARSAL = dataclasses.replace(
    SMOKE, name="cpu-rehearsal", budget_s=600.0, default_sections=("ceilings", "equality", "trainer")
)


@dataclass
class Check:
    """One run's settings and what later sections read from earlier ones."""

    profile: Profile
    device: torch.device
    families: list[str]
    wan_frames: int | None
    reps: int
    out_dir: Path
    ceiling_tflops: float | None = None  # the measured bf16 matmul rate, set by ``ceilings``
    work_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="gpu_check-")))  # models, runs,
    # checkpoints: never under --out ($OUT comes back from the device machine, 8 files at most)
    report: dict = field(default_factory=dict)  # what the trainer sections found, by section (the JSON, the table)

    @property
    def compute_dtype(self) -> torch.dtype:
        """bf16 weights and autocast on both profiles (the CPU runs bf16 too, only slowly)."""
        return torch.bfloat16
