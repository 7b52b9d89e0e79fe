"""The memory planner: per-rank GPU memory of a composed run, without loading any weight (docs/memory.md).

``rewardflow ... --plan`` prints it and exits (nothing is built or submitted); every run on GPUs computes the same
plan at start, logs it and stops with the fixes if it does not fit. The model (docs/memory.md#the-planners-model):

* **states**: the transformer's parameters (counted from its config, ``models/param_inventory.py``) in their storage
  dtype, divided over the ranks (FSDP2 shards them; a replicated LoRA base is whole on every rank), the LoRA
  adapters, the frozen reference, fp32 gradients and AdamW's two fp32 moments of the trainable parameters;
* **frozen companions**: text encoders (on the GPU with ``model.text_encoders=device``; only while encoding new
  prompts with ``offload``; never after start with ``precompute``), the VAE and the reward model, whole on every rank;
* **the largest transformer call**: sampling, ``method.rollout_chunk`` rows without gradients (the working set of
  one block); training, the rows of one micro-batch with gradients (every block's saved activations, or with
  activation checkpointing each block's inputs plus one block recomputed; a LoRA forward's own figures, since a
  frozen linear layer saves no input for a weight gradient), from per-token bytes measured on the CPU
  at published width and reduced depth (``launcher/memory_coefficients.py``, ``scripts/calibrate_memory.py``),
  scaled by the compute dtype; FSDP gathers two blocks at a time (the current one and the prefetched one);
* **decoding**: ``method.decode_chunk`` images through the VAE (and the reward), with gradients for the adjoint
  methods;
* **rollout buffers**: latents, noise, the trajectory states the update reads, per-prompt text conditioning.

Phases: ``rollout`` (sampling, decoding, scoring) and ``update`` (forward + backward + optimizer step); the peak is
the larger one plus a fixed allowance for the CUDA context and allocator. The module imports neither torch nor the
model libraries, so a plan takes a second.
"""

from __future__ import annotations

import copy
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from launcher.memory_coefficients import ACTIVATION_BYTES, VAE_DECODE_BYTES
from rewardflow.errors import ConfigError

if TYPE_CHECKING:
    from models.param_inventory import Inventory

GiB = float(2**30)
DTYPE_BYTES = {"float32": 4, "fp32": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "float64": 8}
CUDA_OVERHEAD = 2.0 * GiB  # CUDA context, NCCL buffers and allocator slack per rank (not measurable on a CPU)
VAE_FACTOR = 8  # pixels per latent pixel of the published VAEs, when no local VAE config says otherwise
VAE_FRAMES = 4  # Wan's frames per latent frame

#: the diffusers families, by the module of the model config's ``_target_``
FAMILY_OF_MODULE = {
    "models.flux": "flux",
    "models.tiny_flux": "flux",
    "models.sd3": "sd3",
    "models.tiny_sd3": "sd3",
    "models.qwenimage": "qwenimage",
    "models.tiny_qwenimage": "qwenimage",
    "models.wan": "wan",
    "models.tiny_wan": "wan",
}
TINY_TWINS = {"models.tiny_flux", "models.tiny_sd3", "models.tiny_qwenimage", "models.tiny_wan"}
#: published parameter counts of the frozen companions (model cards; the sum of the checkpoints' tensors)
TEXT_ENCODER_PARAMS = {
    "flux": 123.1e6 + 4.762e9,  # CLIP-L text + T5-XXL encoder
    "sd3": 123.1e6 + 694.7e6 + 4.762e9,  # CLIP-L + CLIP-G (with projections) + T5-XXL
    "qwenimage": 8.292e9,  # Qwen2.5-VL-7B (with its vision tower)
    "wan": 5.680e9,
}  # UMT5-XXL encoder
VAE_PARAMS = {"flux": 83.8e6, "sd3": 83.8e6, "qwenimage": 126.9e6, "wan": 126.9e6}
REWARD_PARAMS = {"hps": 986.1e6, "pickscore": 986.1e6, "clip": 427.6e6}  # open_clip ViT-H-14, CLIP-H, CLIP-L
#: the calibrated VAE of each family (SD3.5's VAE has FLUX.1's architecture)
VAE_KIND = {"flux": "flux", "sd3": "flux", "qwenimage": "qwenimage", "wan": "wan"}
#: the attention projections the LoRA calibration adapts (scripts/calibrate_memory.py); an adapter on other layers
#: (feed-forward, norms' modulation) keeps their inputs too, so the plan then takes the full fine-tune figures
LORA_CALIBRATED_TARGETS = ("to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out")
QWEN_TEXT_TOKENS = 128  # Qwen-Image keeps prompts unpadded: a long prompt after the chat template


@dataclass
class Line:
    what: str
    rollout: float = 0.0
    update: float = 0.0
    note: str = ""


@dataclass
class MemoryPlan:
    """Bytes per rank by line and phase, and whether the peak fits ``gpu_bytes``."""

    run: str
    world: int
    gpu_bytes: float
    lines: list[Line]
    overhead: float
    notes: list[str] = field(default_factory=list)
    fixes: list[str] = field(default_factory=list)

    def phase(self, name: str) -> float:
        return sum(getattr(line, name) for line in self.lines) + self.overhead

    @property
    def peak(self) -> float:
        return max(self.phase("rollout"), self.phase("update"))

    @property
    def fits(self) -> bool:
        return self.peak <= self.gpu_bytes

    def verdict(self) -> str:
        state = "fits" if self.fits else "DOES NOT FIT"
        return (
            f"{state}: peak {self.peak / GiB:.1f} GiB of {self.gpu_bytes / GiB:.0f} GiB per rank "
            f"({self.world} rank{'s' if self.world > 1 else ''})"
        )

    def table(self) -> str:
        rows = [f"memory plan, per rank: {self.run}", f"  {'':44s} {'rollout':>9s} {'update':>9s}  (GiB)"]
        for line in self.lines:
            if line.rollout or line.update:
                rows.append(
                    f"  {line.what:44s} {line.rollout / GiB:9.2f} {line.update / GiB:9.2f}"
                    + (f"  {line.note}" if line.note else "")
                )
        rows.append(
            f"  {'CUDA context and allocator allowance':44s} {self.overhead / GiB:9.2f} {self.overhead / GiB:9.2f}"
        )
        rows.append(f"  {'total':44s} {self.phase('rollout') / GiB:9.2f} {self.phase('update') / GiB:9.2f}")
        rows += [f"  note: {n}" for n in self.notes]
        rows.append(f"  {self.verdict()}")
        rows += [f"  fix: {f}" for f in self.fixes]
        return "\n".join(rows)


# ------------------------------------------------------------------------------------------- what the run uses
def world_size(cfg: dict) -> int:
    c = cfg["cluster"]
    if c.get("name") == "slurm":
        return int(c["nodes"]) * int(c["tasks_per_node"])
    if c.get("name") == "local_multi":
        return int(c["tasks_per_node"])
    return 1


def family_of(model: dict) -> str | None:
    return FAMILY_OF_MODULE.get(str(model.get("_target_", "")).rsplit(".", 1)[0])


def transformer_config(model: dict, family: str) -> tuple[dict, str]:
    """The transformer's config without weights: a local folder's ``transformer/config.json``, the hub cache's copy,
    the tiny twin's recipe, or the family's published config."""
    from models import published_configs as pub

    path = model.get("path")
    if is_tiny_twin(model):
        return _twin_recipe(model, "TRANSFORMER"), "tiny twin"
    found = _stored_config(path, "transformer")
    if found is not None:
        return found
    published = {
        "flux": pub.FLUX_DEV,
        "sd3": pub.SD35_MEDIUM,
        "qwenimage": pub.QWEN_IMAGE,
        "wan": pub.WAN21_T2V_14B if "14b" in str(path).lower() else pub.WAN21_T2V_1_3B,
    }[family]
    return dict(published), f"published config of {path}"


def is_tiny_twin(model: dict) -> bool:
    """A tiny twin built from its recipe (no ``model.path``)."""
    return model.get("path") is None and str(model.get("_target_", "")).rsplit(".", 1)[0] in TINY_TWINS


def _twin_recipe(model: dict, name: str) -> dict:
    """A tiny twin's component config (``TRANSFORMER``, ``VAE``) from its module (which imports torch)."""
    import importlib

    return dict(getattr(importlib.import_module(str(model["_target_"]).rsplit(".", 1)[0]), name))


def _stored_config(path, component: str) -> tuple[dict, str] | None:
    """``<component>/config.json`` of a local folder or of the hub cache's copy of ``path``; None without either."""
    local = Path(os.path.expanduser(str(path))) / component / "config.json"
    if local.is_file():
        return _config(local), str(local)
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(str(path), f"{component}/config.json")
        if isinstance(cached, str):
            return _config(Path(cached)), f"hub cache of {path}"
    except Exception:  # noqa: BLE001 - no cache or not a hub id
        pass
    return None


def _config(path: Path) -> dict:
    return {k: v for k, v in json.loads(path.read_text()).items() if not k.startswith("_")}


def component_params(model: dict, family: str) -> dict[str, float]:
    """Parameters of the text encoders and the VAE: read from the safetensors headers of a local ``model.path``
    (no weight is read), or the tiny twin's folder, else the family's published sizes."""
    path = model.get("path")
    folder = Path(os.path.expanduser(str(path))) if path else None
    if is_tiny_twin(model):
        return {"text_encoders": 0.0, "vae": 0.0}  # a few MB: below the plan's resolution
    if folder is not None and folder.is_dir():
        encoders = sum(safetensors_params(folder / d) for d in ("text_encoder", "text_encoder_2", "text_encoder_3"))
        return {"text_encoders": float(encoders), "vae": float(safetensors_params(folder / "vae"))}
    return {"text_encoders": TEXT_ENCODER_PARAMS[family], "vae": VAE_PARAMS[family]}


def safetensors_params(folder: Path) -> int:
    """Elements of every tensor in ``folder``'s safetensors files, from their JSON headers alone."""
    import struct

    total = 0
    for file in folder.glob("*.safetensors") if folder.is_dir() else []:
        with open(file, "rb") as f:
            header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
        total += sum(math.prod(v["shape"]) for k, v in header.items() if k != "__metadata__")
    return total


@dataclass(frozen=True)
class CallSize:
    image_tokens: int
    text_tokens: int
    rows_per_sample: int  # 2 with true CFG
    latent_elements: int  # per sample
    pixels: int  # per sample: 3 x height x width x frames
    frames: int = 1


def vae_config(model: dict) -> dict | None:
    """The VAE's config without weights: the tiny twin's recipe, or ``vae/config.json`` of a local ``model.path`` or
    of the hub cache's copy; None without either (the published factor then)."""
    if is_tiny_twin(model):
        return _twin_recipe(model, "VAE")
    found = _stored_config(model["path"], "vae") if model.get("path") else None
    return found[0] if found is not None else None


def vae_factors(model: dict, family: str) -> tuple[int, int]:
    """(pixels per latent pixel, frames per latent frame) as the diffusers pipelines compute them from the VAE's
    config: ``2 ** (len(block_out_channels) - 1)`` (FLUX.1, SD3.5), ``2 ** len(temperal_downsample)`` (Qwen-Image),
    ``scale_factor_spatial`` / ``scale_factor_temporal`` (Wan); the published VAEs' 8 (and 4) without a local
    config (docs/memory.md#the-planners-model)."""
    cfg = vae_config(model) or {}
    if family == "wan":
        return int(cfg.get("scale_factor_spatial", VAE_FACTOR)), int(cfg.get("scale_factor_temporal", VAE_FRAMES))
    if family == "qwenimage" and "temperal_downsample" in cfg:
        return 2 ** len(cfg["temperal_downsample"]), 1
    if "block_out_channels" in cfg:
        return 2 ** (len(cfg["block_out_channels"]) - 1), 1
    return VAE_FACTOR, 1


def call_size(model: dict, family: str, tconfig: dict) -> CallSize:
    h, w = int(model["height"]), int(model["width"])
    factor, frames_per_latent = vae_factors(model, family)
    lat_h, lat_w = h // factor, w // factor
    cfg_rows = 2 if float(model.get("guidance_scale", 1.0)) > 1.0 else 1
    seq = int(model.get("max_sequence_length", 0))
    if family == "wan":
        frames = int(model["num_frames"])
        lat_f = (frames - 1) // frames_per_latent + 1
        p_t, p_h, p_w = tconfig["patch_size"]
        tokens = (lat_f // p_t) * (lat_h // p_h) * (lat_w // p_w)
        return CallSize(
            tokens, seq, cfg_rows, tconfig["in_channels"] * lat_f * lat_h * lat_w, 3 * h * w * frames, frames
        )
    channels = tconfig["in_channels"] if family == "sd3" else tconfig["in_channels"] // 4  # FLUX, Qwen: packed 2x2
    tokens = (lat_h // 2) * (lat_w // 2)
    text = {"flux": seq, "sd3": 77 + seq, "qwenimage": min(seq, QWEN_TEXT_TOKENS)}[family]
    return CallSize(tokens, text, cfg_rows, channels * lat_h * lat_w, 3 * h * w)


def activation_table(family: str, width: int) -> tuple[dict, float]:
    """The calibrated per-token bytes of the family (Wan: the calibrated size nearest in width) and the width ratio."""
    names = [n for n in ACTIVATION_BYTES if n.rstrip("0123456789b") == family or n == family]
    if not names:
        raise ConfigError(
            f"no activation calibration for the {family} family in launcher/memory_coefficients.py; "
            f"run scripts/calibrate_memory.py --write"
        )
    best = min(names, key=lambda n: abs(_width_of(n) - width))
    return ACTIVATION_BYTES[best], width / _width_of(best)


def _width_of(name: str) -> int:
    from models import published_configs as pub

    cfg = {
        "flux": pub.FLUX_DEV,
        "sd3": pub.SD35_MEDIUM,
        "qwenimage": pub.QWEN_IMAGE,
        "wan": pub.WAN21_T2V_1_3B,
        "wan14b": pub.WAN21_T2V_14B,
    }[name]
    return cfg["attention_head_dim"] * cfg["num_attention_heads"]


def _unit_coefficients(table: dict, unit: str) -> dict:
    """Calibrated entry of an inventory unit (SD3's last block is the context-pre-only kind, dual or not)."""
    if unit in table:
        return table[unit]
    if unit.endswith("_last"):
        return table["block_joint_last"]
    raise ConfigError(f"no activation calibration for block kind {unit!r}")


def per_row_bytes(coef: dict, size: CallSize, scale: float) -> float:
    return max(0.0, coef["img"] * size.image_tokens + coef["txt"] * size.text_tokens + coef["const"]) * scale


# --------------------------------------------------------------------------------------------------- the plan
def train_rows(method: dict, rows_per_sample: int) -> tuple[int, str]:
    """Transformer rows in the largest call with gradients: ``method.update_batch`` rows (CFG rows counted), except
    that the adjoint methods put all of a sample's loss rows in one call (docs/performance.md#batched-trained-steps)."""
    b = int(method.get("update_batch", 8))
    if "loss_timesteps" in method:  # EAM: K_t kernel samples per sample
        per = int(method["loss_timesteps"]) * rows_per_sample
    elif "loss_last_steps" in method:  # AM: every loss step of a sample at once
        per = (int(method["loss_last_steps"]) + int(method["loss_random_steps"])) * rows_per_sample
    else:
        return b, f"update_batch {b}"
    n = max(1, b // per)
    return n * per, f"{n} whole sample(s) x {per} loss rows (update_batch {b})"


def checkpointed_share(model: dict) -> float:
    """The share of transformer blocks that keep only their inputs (``model.activation_checkpointing``; ``auto``
    is ``full`` until the planner picks, ``every_k`` one block in k)."""
    mode = str(model.get("activation_checkpointing", "auto"))
    if mode == "none":
        return 0.0
    if mode == "every_k":
        return 1.0 / max(1, int(model.get("activation_checkpointing_k", 2)))
    return 1.0


def kept_states(method: dict) -> int:
    """Trajectory states per sample the update reads (methods/trajectory.py)."""
    name, n = method.get("name"), int(method.get("sampling_steps", 1))
    if name == "flash_grpo":
        return 2
    if name in ("eam", "diffusion_nft"):  # the final latent only
        return 1
    if int(method.get("window_size", 0) or 0) and name in ("flow_grpo_fast", "jagg"):
        return int(method["window_size"]) + 1
    if name == "flow_grpo" or (name == "jagg" and method.get("base") == "flow_grpo"):
        return max(1, min(n - 1, int(float(method["timestep_fraction"]) * n))) + 1
    return n + 1


@dataclass
class Run:
    """What the plan needs from a composed run, computed once."""

    cfg: dict
    family: str
    tconfig: dict  # the transformer's config
    inv: Inventory
    size: CallSize
    source: str
    world: int
    cb: int  # bytes of the compute dtype (bf16 on GPUs, fp32 on the CPU)

    @property
    def model(self) -> dict:
        return self.cfg["model"]

    @property
    def method(self) -> dict:
        return self.cfg["method"]

    @property
    def lora(self) -> bool:
        return self.model.get("finetune") == "lora"

    @property
    def lora_activations(self) -> bool:
        """The calibrated LoRA forward's figures apply: LoRA on attention projections only. A target names modules by
        suffix, as peft matches a list of names (``attn.to_q`` wraps the same projections as ``to_q``)."""
        targets = list(self.model.get("lora_targets") or [])
        return self.lora and all(any(t == c or t.endswith("." + c) for c in LORA_CALIBRATED_TARGETS) for t in targets)

    @property
    def on_gpu(self) -> bool:
        return self.model.get("device", "auto") != "cpu"

    @property
    def adapters(self) -> int:
        if not self.lora:
            return 0
        return self.inv.lora_params(list(self.model.get("lora_targets") or []), int(self.model.get("lora_rank", 0)))

    @property
    def replicated_base(self) -> bool:
        return self.lora and self.model.get("base_sharding") == "replicate"

    @property
    def reference(self) -> bool:
        """A frozen copy is kept: full fine-tuning with a KL term or an adjoint method."""
        kl = float(self.method.get("kl_beta", 0) or 0) > 0 or "reward_scale" in self.method
        return kl and not self.lora

    @property
    def shards(self) -> int:
        """Ranks a parameter is sharded over: every rank (``cluster.mesh=fsdp``) or one shard group (``hsdp``)."""
        cluster = self.cfg.get("cluster", {})
        if cluster.get("mesh", "fsdp") != "hsdp":
            return self.world
        return min(self.world, int(cluster.get("shard_size") or cluster.get("tasks_per_node") or self.world))

    def per_rank(self, nbytes: float) -> float:
        return nbytes / self.shards

    @property
    def samples(self) -> int:
        return math.ceil(int(self.method["prompts_per_step"]) / self.world) * int(self.method.get("group_size", 1))


def plan(cfg: dict, world: int | None = None, gpu_gb: float | None = None) -> MemoryPlan | None:
    """The plan of a composed run (a plain dict, ``OmegaConf.to_container(cfg, resolve=True)``), or None for a
    model the planner does not know (the SOC toy)."""
    from models.param_inventory import INVENTORIES

    model = cfg["model"]
    family = family_of(model)
    if family is None:
        return None
    tconfig, source = transformer_config(model, family)
    on_gpu = model.get("device", "auto") != "cpu"
    dtype = model.get("dtype", "auto")
    cb = DTYPE_BYTES[dtype] if dtype != "auto" else (2 if on_gpu else 4)
    run = Run(
        cfg,
        family,
        tconfig,
        INVENTORIES[family](tconfig),
        call_size(model, family, tconfig),
        source,
        world or world_size(cfg),
        cb,
    )
    lines = [*state_lines(run), *companion_lines(run), buffer_line(run), *call_lines(run)]
    gpu = float(gpu_gb if gpu_gb is not None else cfg["cluster"].get("gpu_mem_gb", 80.0)) * GiB
    method = cfg["method"]
    name = (
        f"method={method.get('name')} model={model.get('name')} finetune={model.get('finetune')} "
        f"({run.inv.params / 1e9:.2f} B, {source})"
    )
    result = MemoryPlan(name, run.world, gpu, lines, CUDA_OVERHEAD if on_gpu else 0.0)
    if model.get("text_encoders") == "precompute":
        result.notes.append("text encoders: used once at start (precompute), then freed")
    if not on_gpu:
        result.notes.append("CPU run: figures are process memory, no CUDA allowance")
    return result


def state_lines(run: Run) -> list[Line]:
    """Weights, reference, gradients, optimizer state and the blocks FSDP gathers."""
    P, cb, lines = run.inv.params, run.cb, []
    trainable = run.adapters if run.lora else P
    if run.lora:
        base = P * cb if run.replicated_base else run.per_rank(P * cb)
        lines.append(
            Line(
                "transformer (frozen LoRA base)",
                base,
                base,
                f"{P / 1e9:.2f} B params, {'replicated' if run.replicated_base else 'sharded'}",
            )
        )
        adapters = run.per_rank(run.adapters * 4)
        lines.append(Line("LoRA adapters (fp32)", adapters, adapters, f"{run.adapters / 1e6:.1f} M params"))
    else:
        lines.append(
            Line(
                "transformer (fp32 master weights)", run.per_rank(P * 4), run.per_rank(P * 4), f"{P / 1e9:.2f} B params"
            )
        )
    if run.reference:
        name = run.model.get("reference_dtype", "bfloat16")
        lines.append(
            Line(f"frozen reference ({name})", run.per_rank(P * DTYPE_BYTES[name]), run.per_rank(P * DTYPE_BYTES[name]))
        )
    if "old_decay_rate" in run.method:  # DiffusionNFT's lagging copy of the trainable weights (v_old)
        old = run.per_rank(trainable * 4)
        lines.append(Line("old policy v_old (fp32)", old, old))
    lines.append(Line("gradients (fp32)", 0.0, run.per_rank(trainable * 4)))
    moments = 2 if "adam" in str(run.cfg.get("optimizer", {}).get("_target_", "adam")).lower() else 1
    optimizer = run.per_rank(moments * trainable * 4)
    lines.append(Line("optimizer state (fp32)", optimizer, optimizer))
    if run.shards > 1 and not run.replicated_base:
        gathered = (run.inv.largest_pair + run.inv.units[0].params) * cb  # current + prefetched block
        lines.append(Line("FSDP: gathered blocks (2) and root", gathered, gathered * (2 if run.reference else 1)))
    return lines


def companion_lines(run: Run) -> list[Line]:
    counts = component_params(run.model, run.family)
    vae = counts["vae"] * vae_dtype_bytes(run)
    reward = _reward_bytes(run.cfg["reward"], 2 if run.on_gpu else 4)
    lines = [Line("VAE", vae, vae), Line("reward model", reward, reward)]
    if run.model.get("text_encoders", "offload") == "device":
        enc = counts["text_encoders"] * run.cb
        lines.insert(0, Line("text encoders", enc, enc))
    return lines


def vae_dtype_bytes(run: Run) -> int:
    return 4 if run.family == "wan" else run.cb  # Wan's VAE runs in fp32 (models/wan.py)


def buffer_line(run: Run) -> Line:
    """Latents, noise, velocities and the kept trajectory states of every sample; per-prompt text conditioning."""
    method, size = run.method, run.size
    states = kept_states(method)
    offload = bool(method.get("trajectory_offload"))
    prompts = math.ceil(int(method["prompts_per_step"]) / run.world)
    text_width = run.tconfig.get("joint_attention_dim") or run.tconfig["text_dim"]
    nbytes = (
        run.samples * size.latent_elements * 4 * (4 + (0 if offload else states))
        + prompts * size.text_tokens * text_width * run.cb
    )
    return Line(
        "rollout buffers",
        nbytes,
        nbytes,
        f"{run.samples} samples, {states} state(s) each{' (offloaded)' if offload else ''}",
    )


def call_lines(run: Run) -> list[Line]:
    """The largest transient of each phase: a sampling call, a decode or an encoding; a training call."""
    method, size, inv = run.method, run.size, run.inv
    table, ratio = activation_table(run.family, inv.width)
    scale = ratio * run.cb / 4

    def pick(coef: dict, kind: str) -> dict:
        """A LoRA forward on the attention projections saves less than a full one (a frozen linear keeps no input):
        its own figures (``saved_lora``, ``peak_lora``; sampling calls have no such distinction)."""
        return coef[f"{kind}_lora"] if run.lora_activations and kind in ("saved", "peak") else coef[kind]

    def unit(u, kind: str) -> float:
        return per_row_bytes(pick(_unit_coefficients(table, u.name), kind), size, scale)

    def root(kind: str) -> float:
        return per_row_bytes(pick(table["root"], kind), size, scale)

    call_rows = max(1, int(method.get("rollout_chunk", 32)) // size.rows_per_sample) * size.rows_per_sample
    call_rows = min(call_rows, run.samples * size.rows_per_sample)
    sampling = call_rows * (root("infer") + max(unit(u, "infer") for u in inv.blocks))  # one block at a time
    chunk = min(int(method.get("decode_chunk", 8)), run.samples)
    grad = "reward_scale" in method  # the adjoint methods differentiate the reward through the VAE
    per_pixel = VAE_DECODE_BYTES[VAE_KIND[run.family]]["grad" if grad else "infer"] * vae_dtype_bytes(run) / 4
    frame = size.pixels // size.frames // 3
    decode = chunk * (frame * per_pixel + size.pixels * 4)  # one frame's working set + the decoded images
    encode = (
        component_params(run.model, run.family)["text_encoders"] * run.cb
        if run.model.get("text_encoders", "offload") == "offload"
        else 0.0
    )
    options = [
        (sampling, f"sampling call, {call_rows} rows"),
        (decode, f"decoding {chunk} images"),
        (encode, "text encoders, encoding new prompts"),
    ]
    transient, which = max(options, key=lambda o: o[0])
    rows, why = train_rows(method, size.rows_per_sample)
    share = checkpointed_share(run.model)
    working = max(unit(u, "peak") - unit(u, "saved") for u in inv.blocks)  # the block running
    # a checkpointed block keeps its inputs (the backward recomputes one block at a time); the others all they save
    inputs = sum(u.count * (size.image_tokens + size.text_tokens) * inv.width * run.cb for u in inv.blocks)
    full = sum(u.count * unit(u, "saved") for u in inv.blocks)
    saved = share * inputs + (1 - share) * full + (max(unit(u, "saved") for u in inv.blocks) if share else 0.0)
    train = rows * (root("peak") + saved + working)
    grads = (run.adapters / max(1, inv.depth) if run.lora else inv.largest_unit) * (run.cb + 4)
    return [
        Line("largest rollout transient", transient, 0.0, which),
        Line(
            "training call: activations",
            0.0,
            train,
            f"{why} = {rows} rows, {share:.0%} of blocks checkpointed"
            + (", LoRA beyond attention: full fine-tune figures" if run.lora and not run.lora_activations else ""),
        ),
        Line("training call: one block's gradients", 0.0, grads),
    ]


def _reward_bytes(reward: dict, dtype_bytes: int) -> float:
    if "components" in reward:
        return sum(_reward_bytes({"name": n, **(c or {})}, dtype_bytes) for n, c in reward["components"].items())
    return REWARD_PARAMS.get(str(reward.get("name")), 0.0) * dtype_bytes


# --------------------------------------------------------------------------------------------------- the fixes
#: single changes tried in order when a run does not fit (key, value, when it applies)
CANDIDATES = (
    (
        "model.activation_checkpointing",
        "full",
        lambda c: str(c["model"].get("activation_checkpointing", "auto")) not in ("full", "auto"),
    ),
    ("method.update_batch", 2, lambda c: int(c["method"].get("update_batch", 8)) > 2),
    ("method.rollout_chunk", None, lambda c: True),
    ("method.decode_chunk", 1, lambda c: int(c["method"].get("decode_chunk", 8)) > 1),
    ("method.trajectory_offload", True, lambda c: not c["method"].get("trajectory_offload")),
    ("model.text_encoders", "precompute", lambda c: c["model"].get("text_encoders", "offload") != "precompute"),
    ("model.reference_dtype", "bfloat16", lambda c: c["model"].get("reference_dtype") == "float32"),
    ("model.base_sharding", "shard", lambda c: c["model"].get("base_sharding") == "replicate"),
    ("model.finetune", "lora", lambda c: c["model"].get("finetune") == "full"),
)


def with_override(cfg: dict, key: str, value) -> dict:
    out = copy.deepcopy(cfg)
    group, name = key.split(".", 1)
    out[group][name] = value
    return out


def suggest_fixes(cfg: dict, result: MemoryPlan, world: int, gpu_gb: float | None) -> list[str]:
    """Single changes that make the run fit, then the rank count it needs unchanged."""
    fixes, current = [], cfg
    for key, value, applies in CANDIDATES:
        if not applies(current):
            continue
        if key == "method.rollout_chunk":
            value = 2 if float(cfg["model"].get("guidance_scale", 1.0)) > 1 else 1
            if int(current["method"].get("rollout_chunk", 32)) <= value:
                continue
        trial = plan(with_override(current, key, value), world, gpu_gb)
        if trial is not None and trial.fits:
            fixes.append(f"{key}={_fmt(value)} (peak {trial.peak / GiB:.1f} GiB)")
    combined, applied = cfg, []
    if not fixes:  # no single change: the changes together (the method kept)
        for key, value, applies in CANDIDATES:
            if key in ("method.rollout_chunk", "model.finetune") or not applies(combined):
                continue
            combined = with_override(combined, key, value)
            applied.append(f"{key}={_fmt(value)}")
            trial = plan(combined, world, gpu_gb)
            if trial is not None and trial.fits:
                fixes.append(" ".join(applied) + f" (peak {trial.peak / GiB:.1f} GiB)")
                break
    needed = ranks_needed(cfg, world, gpu_gb)
    if needed:
        fixes.append(f"or {_ranks(needed)} unchanged")
    elif not fixes and applied and (needed := ranks_needed(combined, world, gpu_gb)):
        fixes.append(" ".join(applied) + f" on {_ranks(needed)}")
    return fixes


def _ranks(n: int) -> str:
    return (
        f"{n} ranks (e.g. cluster.nodes={math.ceil(n / 8)} cluster.gpus_per_node={min(n, 8)}) with "
        f"method.prompts_per_step a multiple of {n}"
    )


def ranks_needed(cfg: dict, world: int, gpu_gb: float | None, limit: int = 1024) -> int | None:
    """The fewest ranks (a multiple of 8 beyond 8) at which this run fits unchanged, or None."""
    n = world
    while n < limit:
        n = n * 2 if n < 8 else n + 8
        trial = plan(cfg, n, gpu_gb)
        if trial is not None and trial.fits:
            return n
    return None


def _fmt(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def plan_with_fixes(cfg: dict, world: int | None = None, gpu_gb: float | None = None) -> MemoryPlan | None:
    world = world or world_size(cfg)
    result = plan(cfg, world, gpu_gb)
    if result is not None and not result.fits:
        result.fixes = suggest_fixes(cfg, result, world, gpu_gb)
    return result


def check_at_start(cfg, world) -> None:
    """On a GPU run: log the plan against this GPU's memory and stop with its fixes if the planned peak does not fit
    (docs/memory.md#the-check-at-start). ``cfg``: the run's DictConfig; ``world``: rewardflow.distributed.World."""
    import logging

    import torch
    from omegaconf import OmegaConf

    if not torch.cuda.is_available() or cfg.model.get("device", "auto") == "cpu":
        return
    gpu_gb = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory / GiB
    container = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(container, dict)  # the run's config is a DictConfig
    result = plan_with_fixes(container, world.world_size, gpu_gb)
    if result is None:
        return
    if world.is_main:
        logging.getLogger(__name__).info("%s", result.table())
    if not result.fits:
        raise ConfigError(
            f"the planned memory does not fit: {result.verdict()}. Fix: "
            + "; ".join(result.fixes or ["more ranks or a smaller configuration"])
            + " (`rewardflow ... --plan` prints the table)"
        )


# ----------------------------------------------------------------------------------------------- command line
def compose_runs(overrides: list[str]) -> list[tuple[list[str], dict]]:
    """Every run of a command line (sweeps expanded, as ``-m`` would launch them), composed like the CLI composes
    them, as ``(overrides, resolved config)``. Nothing is built, validated against files or submitted."""
    import itertools

    from hydra import compose, initialize_config_dir, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    from launcher import installation
    from launcher.config import register_configs

    register_configs()
    parsed = OverridesParser.create().parse_overrides(overrides)
    choices = [
        [o.input_line]
        if not o.is_sweep_override()
        else [f"{o.get_key_element()}={v}" for v in o.sweep_string_iterator()]
        for o in parsed
    ]
    GlobalHydra.instance().clear()
    path = installation.config_path()
    init = (
        initialize_config_module(path.removeprefix("pkg://"), version_base="1.3")
        if path.startswith("pkg://")
        else initialize_config_dir(config_dir=path, version_base="1.3")
    )
    runs: list[tuple[list[str], dict]] = []
    with init:
        for combo in itertools.product(*choices) if choices else [()]:
            cfg = compose(config_name="train", overrides=list(combo))
            container = OmegaConf.to_container(cfg, resolve=True)
            assert isinstance(container, dict)  # compose returns a DictConfig
            runs.append((list(combo), container))
    return runs


def main(overrides: list[str]) -> int:
    """``rewardflow <overrides> --plan``: the plan of every run of the command line; exit status 1 if one does not
    fit."""
    status = 0
    for combo, cfg in compose_runs(overrides):
        result = plan_with_fixes(cfg)
        if result is None:
            print(
                f"memory plan: model={cfg['model'].get('name')} is not a diffusers family; nothing to plan "
                f"({' '.join(combo)})"
            )
            continue
        print(result.table())
        status |= 0 if result.fits else 1
    return status
