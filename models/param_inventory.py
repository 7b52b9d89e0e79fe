"""Parameter inventory of each family's transformer from its config alone (no torch, no weights): every linear layer
of the root and of each block type (one FSDP unit each), so the memory planner (``launcher/plan/memory_plan.py``) knows
the parameter count, the largest unit that FSDP gathers at once, the LoRA adapter size for any ``model.lora_targets``
and the hidden width, in milliseconds. tests/test_memory_plan.py checks every count against the diffusers class
built on the meta device, at published and tiny sizes.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod


@dataclass(frozen=True)
class Linear:
    name: str  # module path inside its unit, e.g. "attn.to_q" (LoRA targets match its suffix)
    fan_in: int
    fan_out: int
    bias: bool = True

    @property
    def params(self) -> int:
        return self.fan_in * self.fan_out + (self.fan_out if self.bias else 0)


@dataclass(frozen=True)
class Unit:
    """One FSDP unit (the root or a block type) and how many there are."""

    name: str
    linears: tuple[Linear, ...]
    other: int = 0  # parameters outside linear layers (norm weights, modulation tables, patch convs)
    count: int = 1

    @property
    def params(self) -> int:
        return sum(lin.params for lin in self.linears) + self.other


@dataclass(frozen=True)
class Inventory:
    family: str
    width: int  # hidden size of the token streams
    units: tuple[Unit, ...]  # the root first, then the block types

    @property
    def params(self) -> int:
        return sum(u.params * u.count for u in self.units)

    @property
    def blocks(self) -> tuple[Unit, ...]:
        return self.units[1:]

    @property
    def depth(self) -> int:
        return sum(u.count for u in self.blocks)

    @property
    def largest_unit(self) -> int:
        return max(u.params for u in self.units)

    @property
    def largest_pair(self) -> int:
        """The most parameters of two consecutive blocks in forward order (FSDP2 holds the block running and the
        one it prefetches)."""
        order = [u.params for u in self.blocks for _ in range(u.count)]
        if len(order) < 2:
            return sum(order)
        return max(a + b for a, b in zip(order, order[1:]))

    def lora_params(self, targets: list[str], rank: int) -> int:
        """Adapter parameters peft adds for ``targets`` (a module matches a target equal to its name's suffix)."""

        def hit(name: str) -> bool:
            return any(name == t or name.endswith("." + t) for t in targets)

        return sum(
            u.count * rank * (lin.fan_in + lin.fan_out) for u in self.units for lin in u.linears if hit(lin.name)
        )


def _embedder(prefix: str, fan_in: int, width: int) -> list[Linear]:
    return [Linear(f"{prefix}.linear_1", fan_in, width), Linear(f"{prefix}.linear_2", width, width)]


def _joint_attention(w: int, added_out: bool = True) -> list[Linear]:
    names = ["to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj"]
    return [Linear(f"attn.{n}", w, w) for n in names + (["to_add_out"] if added_out else [])]


def _mlp(prefix: str, w: int, hidden: int) -> list[Linear]:
    return [Linear(f"{prefix}.net.0.proj", w, hidden), Linear(f"{prefix}.net.2", hidden, w)]


def flux(c: dict) -> Inventory:
    hd, w = c["attention_head_dim"], c["attention_head_dim"] * c["num_attention_heads"]
    out = c.get("out_channels") or c["in_channels"]
    root = [
        *_embedder("time_text_embed.timestep_embedder", 256, w),
        *(_embedder("time_text_embed.guidance_embedder", 256, w) if c.get("guidance_embeds") else []),
        *_embedder("time_text_embed.text_embedder", c["pooled_projection_dim"], w),
        Linear("context_embedder", c["joint_attention_dim"], w),
        Linear("x_embedder", c["in_channels"], w),
        Linear("norm_out.linear", w, 2 * w),
        Linear("proj_out", w, c["patch_size"] ** 2 * out),
    ]
    double = [
        Linear("norm1.linear", w, 6 * w),
        Linear("norm1_context.linear", w, 6 * w),
        *_joint_attention(w),
        *_mlp("ff", w, 4 * w),
        *_mlp("ff_context", w, 4 * w),
    ]
    single = [
        Linear("norm.linear", w, 3 * w),
        Linear("proj_mlp", w, 4 * w),
        Linear("proj_out", 5 * w, w),
        *[Linear(f"attn.{n}", w, w) for n in ("to_q", "to_k", "to_v")],
    ]
    return Inventory(
        "flux",
        w,
        (
            Unit("root", tuple(root)),
            Unit("double", tuple(double), 4 * hd, c["num_layers"]),
            Unit("single", tuple(single), 2 * hd, c["num_single_layers"]),
        ),
    )


def sd3(c: dict) -> Inventory:
    hd, w = c["attention_head_dim"], c["attention_head_dim"] * c["num_attention_heads"]
    p, out = c["patch_size"], c.get("out_channels") or c["in_channels"]
    qk = 2 * hd if c.get("qk_norm") else 0
    root = [
        *_embedder("time_text_embed.timestep_embedder", 256, w),
        *_embedder("time_text_embed.text_embedder", c["pooled_projection_dim"], w),
        Linear("context_embedder", c["joint_attention_dim"], c["caption_projection_dim"]),
        Linear("norm_out.linear", w, 2 * w),
        Linear("proj_out", w, p * p * out),
    ]
    patch_conv = c["in_channels"] * w * p * p + w
    dual = set(c.get("dual_attention_layers") or ())
    n = c["num_layers"]

    def block(i: int) -> Unit:
        last, is_dual = i == n - 1, i in dual
        lin = [
            Linear("norm1.linear", w, (9 if is_dual else 6) * w),
            Linear("norm1_context.linear", w, (2 if last else 6) * w),
            *_joint_attention(w, added_out=not last),
            *_mlp("ff", w, 4 * w),
            *([] if last else _mlp("ff_context", w, 4 * w)),
        ]
        if is_dual:
            lin += [Linear(f"attn2.{m}", w, w) for m in ("to_q", "to_k", "to_v", "to_out.0")]
        return Unit(
            f"block_{'dual' if is_dual else 'joint'}{'_last' if last else ''}",
            tuple(lin),
            2 * qk + (qk if is_dual else 0),
        )

    kinds: dict[str, Unit] = {}
    for i in range(n):
        u = block(i)
        kinds[u.name] = Unit(u.name, u.linears, u.other, kinds[u.name].count + 1 if u.name in kinds else 1)
    return Inventory("sd3", w, (Unit("root", tuple(root), patch_conv), *kinds.values()))


def qwenimage(c: dict) -> Inventory:
    hd, w = c["attention_head_dim"], c["attention_head_dim"] * c["num_attention_heads"]
    out = c.get("out_channels") or c["in_channels"]
    root = [
        *_embedder("time_text_embed.timestep_embedder", 256, w),
        *(_embedder("time_text_embed.guidance_embedder", 256, w) if c.get("guidance_embeds") else []),
        Linear("img_in", c["in_channels"], w),
        Linear("txt_in", c["joint_attention_dim"], w),
        Linear("norm_out.linear", w, 2 * w),
        Linear("proj_out", w, c["patch_size"] ** 2 * out),
    ]
    block = [
        Linear("img_mod.1", w, 6 * w),
        Linear("txt_mod.1", w, 6 * w),
        *_joint_attention(w),
        *_mlp("img_mlp", w, 4 * w),
        *_mlp("txt_mlp", w, 4 * w),
    ]
    return Inventory(
        "qwenimage",
        w,
        (Unit("root", tuple(root), c["joint_attention_dim"]), Unit("block", tuple(block), 4 * hd, c["num_layers"])),
    )


def wan(c: dict) -> Inventory:
    w = c["attention_head_dim"] * c["num_attention_heads"]
    patch = prod(c["patch_size"])
    root = [
        *_embedder("condition_embedder.time_embedder", c["freq_dim"], w),
        Linear("condition_embedder.time_proj", w, 6 * w),
        *_embedder("condition_embedder.text_embedder", c["text_dim"], w),
        Linear("proj_out", w, c["out_channels"] * patch),
    ]
    attn = [Linear(f"{a}.{n}", w, w) for a in ("attn1", "attn2") for n in ("to_q", "to_k", "to_v", "to_out.0")]
    block = [*attn, *_mlp("ffn", w, c["ffn_dim"])]
    other = 6 * w + 4 * w + (2 * w if c.get("cross_attn_norm") else 0)  # modulation table, qk norms, norm2
    return Inventory(
        "wan",
        w,
        (
            Unit("root", tuple(root), 2 * w + c["in_channels"] * w * patch + w),
            Unit("block", tuple(block), other, c["num_layers"]),
        ),
    )


#: family key (launcher/plan/model_sizes.py FAMILY_OF_MODULE) -> inventory builder
INVENTORIES = {"flux": flux, "sd3": sd3, "qwenimage": qwenimage, "wan": wan}
