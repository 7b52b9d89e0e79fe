"""The memory planner: per-rank GPU memory of a composed run, without loading any weight (docs/memory.md).

``rewardflow ... --plan`` prints it and exits (nothing is built or submitted); every run on GPUs computes the same
plan at start, logs it and stops with the fixes if it does not fit. The model (docs/memory.md#the-planners-model):

* **states**: the transformer's parameters (counted from its config, ``models/param_inventory.py``) in their storage
  dtype, divided over the ranks (FSDP2 shards them; a replicated LoRA base is whole on every rank), the LoRA
  adapters, the frozen reference, the EMA (``trainer.ema_decay``; twice while it is swapped in), fp32 gradients and
  AdamW's two fp32 moments of the trainable parameters;
* **frozen companions**: text encoders (on the GPU with ``model.text_encoders=device``; only while encoding new
  prompts with ``offload``; never after start with ``precompute``), the VAE and the reward model (fp32 until its
  first call), whole on every rank;
* **the largest transformer call**: sampling, ``method.rollout_chunk`` rows without gradients (the working set of
  one block); training, the rows of one micro-batch with gradients (every block's saved activations, or with
  activation checkpointing each block's inputs plus one block recomputed; a LoRA forward's own figures, since a
  frozen linear layer saves no input for a weight gradient), from per-token bytes measured on the CPU
  at published width and reduced depth (``launcher/plan/coefficients.py``, ``scripts/calibrate_memory.py``),
  scaled by the compute dtype, plus the normalisation outputs autocast keeps in fp32; FSDP gathers two blocks at a time (the current one and the prefetched one);
* **decoding**: ``method.decode_chunk`` images through the VAE (and the reward), with gradients for the adjoint
  methods;
* **rollout buffers**: latents, noise, the trajectory states the update reads, per-prompt text conditioning.

Phases: ``rollout`` (sampling, decoding, scoring) and ``update`` (forward + backward + optimizer step); the peak is
the larger one plus a fixed allowance for the CUDA context and allocator. The module imports neither torch nor the
model libraries, so a plan takes a second.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from launcher.plan.activations import (
    LORA_CALIBRATED_TARGETS,
    activation_table,
    checkpointed_share,
    kept_means,
    kept_states,
    norm_output_bytes,
    per_row_bytes,
    train_rows,
    unit_coefficients,
)
from launcher.plan.coefficients import VAE_DECODE_BYTES
from launcher.plan.model_sizes import (
    DTYPE_BYTES,
    REWARD_PARAMS,
    VAE_KIND,
    CallSize,
    call_size,
    component_params,
    family_of,
    transformer_config,
)

if TYPE_CHECKING:
    from models.param_inventory import Inventory

GiB = float(2**30)
CUDA_OVERHEAD = 2.0 * GiB  # CUDA context, NCCL buffers and allocator slack per rank (not measurable on a CPU)


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
    choices: dict[str, str] = field(default_factory=dict)  # the ``auto`` keys decided from the plan (choices.py)

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


def world_size(cfg: dict) -> int:
    c = cfg["cluster"]
    if c.get("name") == "slurm":
        return int(c["nodes"]) * int(c["tasks_per_node"])
    if c.get("name") == "local_multi":
        return int(c["tasks_per_node"])
    return 1


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
    if "old_decay_rate" in run.method:  # the lagging copy of the trainable weights: DiffusionNFT's v_old, AWM's EMA
        old = run.per_rank(trainable * 4)
        name = "EMA policy v_ema (fp32)" if run.method.get("name") == "awm" else "old policy v_old (fp32)"
        lines.append(Line(name, old, old))
    ema = ema_line(run, trainable)
    if ema is not None:
        lines.append(ema)
    lines.append(Line("gradients (fp32)", 0.0, run.per_rank(trainable * 4)))
    moments = 2 if "adam" in str(run.cfg.get("optimizer", {}).get("_target_", "adam")).lower() else 1
    optimizer = run.per_rank(moments * trainable * 4)
    lines.append(Line("optimizer state (fp32)", optimizer, optimizer))
    if run.shards > 1 and not run.replicated_base:
        gathered = (run.inv.largest_pair + run.inv.units[0].params) * cb  # current + prefetched block
        lines.append(Line("FSDP: gathered blocks (2) and root", gathered, gathered * (2 if run.reference else 1)))
    return lines


def ema_line(run: Run, trainable: float) -> Line | None:
    """``trainer.ema_decay`` > 0: a clone of every trainable parameter in its storage dtype (fp32 master weights or
    adapters), sharded like it (launcher/train/ema.py). While ``applied()`` swaps the averages in, the trained weights
    are cloned as well: twice the EMA in the sampling phase when the run evaluates (``eval.use_ema``) or exports
    (``trainer.export_ema``) the EMA weights (docs/memory.md#the-planners-model)."""
    trainer, evaluation = run.cfg.get("trainer") or {}, run.cfg.get("eval") or {}
    if not float(trainer.get("ema_decay", 0) or 0) > 0:
        return None
    ema = run.per_rank(trainable * 4)
    swapped = bool(evaluation.get("use_ema") and evaluation.get("every")) or bool(trainer.get("export_ema"))
    return Line(
        "EMA of the trainable weights (fp32)",
        2 * ema if swapped else ema,
        ema,
        "x2 while applied() swaps it in (evaluation, export)" if swapped else "",
    )


def companion_lines(run: Run) -> list[Line]:
    counts = component_params(run.model, run.family)
    vae = counts["vae"] * vae_dtype_bytes(run)
    # a reward model is loaded in fp32 and cast to reward.dtype at its first call (rewards/clip_base.py), after the
    # first step's sampling: fp32 in the rollout phase, its compute dtype afterwards
    first, later = _reward_bytes(run.cfg["reward"], run.on_gpu, True), _reward_bytes(run.cfg["reward"], run.on_gpu)
    lines = [
        Line("VAE", vae, vae),
        Line("reward model", first, later, "fp32 until its first call" if first != later else ""),
    ]
    held_out = _eval_rewards(run.cfg)  # built with the evaluator before the first step, on the device throughout
    first, later = (sum(_reward_bytes(r, run.on_gpu, f) for r in held_out) for f in (True, False))
    if first:
        names = ", ".join(str(r.get("name")) for r in held_out)
        lines.append(Line(f"held-out rewards ({names})", first, later, "eval.rewards; fp32 until their first call"))
    if run.model.get("text_encoders", "offload") == "device":
        enc = counts["text_encoders"] * run.cb
        lines.insert(0, Line("text encoders", enc, enc))
    return lines


def vae_dtype_bytes(run: Run) -> int:
    return 4 if run.family == "wan" else run.cb  # Wan's VAE runs in fp32 (models/wan.py)


def buffer_line(run: Run) -> Line:
    """Latents, noise, velocities and the kept trajectory states of every sample; per-prompt text conditioning."""
    method, size = run.method, run.size
    states, means = kept_states(method), kept_means(method)
    offload = bool(method.get("trajectory_offload"))
    prompts = math.ceil(int(method["prompts_per_step"]) / run.world)
    text_width = run.tconfig.get("joint_attention_dim") or run.tconfig["text_dim"]
    nbytes = (
        run.samples * size.latent_elements * 4 * (4 + (0 if offload else states) + means)
        + prompts * size.text_tokens * text_width * run.cb
    )
    return Line(
        "rollout buffers",
        nbytes,
        nbytes,
        f"{run.samples} samples, {states} state(s) each{' (offloaded)' if offload else ''}"
        + (f", {means} old mean(s)" if means else ""),
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
        return per_row_bytes(pick(unit_coefficients(table, u.name), kind), size, scale)

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
        if run.model.get("text_encoders", "offload") in ("offload", "auto")  # auto: offload until decided
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

    def norms(name: str) -> float:
        return norm_output_bytes(run.family, name, size.image_tokens, size.text_tokens, inv.width, run.cb)

    # fp32 normalisation outputs under autocast: every block's when it keeps its activations, one recomputed block's
    blocks = [norms(u.name) for u in inv.blocks]
    norm = rows * (norms("root") + (1 - share) * sum(u.count * b for u, b in zip(inv.blocks, blocks)))
    norm += rows * (max(blocks) if share else 0.0)
    return [
        Line("largest rollout transient", transient, 0.0, which),
        Line(
            "training call: activations",
            0.0,
            train,
            f"{why} = {rows} rows, {share:.0%} of blocks checkpointed"
            + (", LoRA beyond attention: full fine-tune figures" if run.lora and not run.lora_activations else ""),
        ),
        Line("training call: fp32 norm outputs (autocast)", 0.0, norm),
        Line("training call: one block's gradients", 0.0, grads),
    ]


def _eval_rewards(cfg: dict) -> list[dict]:
    """The ``eval.rewards`` a run evaluating (``eval.every`` > 0) builds besides its trained reward (an entry with the
    trained reward's name is that reward, scored once: launcher/train/evaluation.py ``extra_rewards``)."""
    e = cfg.get("eval") or {}
    if not int(e.get("every") or 0):
        return []
    trained = str((cfg.get("reward") or {}).get("name"))
    return [r for n, r in (e.get("rewards") or {}).items() if r is not None and str(n) != trained]


def _reward_bytes(reward: dict, on_gpu: bool, first_call: bool = False) -> float:
    """The reward models' weights: fp32 before the first call, then ``reward.dtype`` (auto: bf16 on GPUs)."""
    if "components" in reward:
        return sum(_reward_bytes({"name": n, **(c or {})}, on_gpu, first_call) for n, c in reward["components"].items())
    if reward.get("embedding") == "pixels":  # reward=diversity_pixels: no weights
        return 0.0
    dtype = str(reward.get("dtype", "auto"))
    nbytes = 4 if first_call else DTYPE_BYTES[dtype] if dtype != "auto" else (2 if on_gpu else 4)
    return REWARD_PARAMS.get(str(reward.get("name")), 0.0) * nbytes
