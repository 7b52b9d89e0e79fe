"""What one transformer call keeps for the backward, from the calibrated per-token bytes (``coefficients.py``,
``scripts/calibrate_memory.py``; docs/memory.md#the-planners-model): the calibration row of a family and block kind,
the rows of the largest call with gradients, the share of checkpointed blocks and the trajectory states kept."""

from __future__ import annotations

from launcher.plan.coefficients import ACTIVATION_BYTES
from launcher.plan.model_sizes import CallSize
from rewardflow.errors import ConfigError

#: the attention projections the LoRA calibration adapts (scripts/calibrate_memory.py); an adapter on other layers
#: (feed-forward, norms' modulation) keeps their inputs too, so the plan then takes the full fine-tune figures
LORA_CALIBRATED_TARGETS = ("to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out")


#: width-sized normalisation outputs one block saves per (image, text) token: its LayerNorms (``AdaLayerNormZero``,
#: ``FP32LayerNorm``) and the RMSNorms of queries and keys (diffusers' block classes). Under bf16 autocast a layer norm
#: runs in fp32 and so returns fp32, and an RMSNorm with fp32 (master) weights returns fp32 too
#: (https://pytorch.org/docs/stable/amp.html#cuda-ops-that-can-autocast-to-float32), where the fp32 calibration scaled
#: by the compute dtype assumes bf16: each adds ``width x (4 - 2)`` bytes per token (docs/memory.md#the-planners-model).
NORM_OUTPUTS = {
    "flux": {"double": (4, 4), "single": (3, 3), "root": (1, 0)},  # norm1, norm2, q, k per stream; single: norm, q, k
    "sd3": {"block_dual": (6, 4), "block_joint": (4, 4), "block_joint_last": (4, 3), "root": (1, 0)},
    "qwenimage": {"block": (4, 4), "root": (1, 0)},  # img/txt norm1, norm2 and their q, k norms
    "wan": {"block": (6, 1), "root": (1, 0)},  # norm1, norm2, norm3, self- and cross-attention q, k; the text's k
}


def norm_output_bytes(family: str, unit: str, image_tokens: int, text_tokens: int, width: int, cb: int) -> float:
    """Bytes per row that the fp32 normalisation outputs of one ``unit`` add to its saved activations over the
    compute dtype's figures (0 in fp32, where the calibration counted them already)."""
    table = NORM_OUTPUTS.get(family, {})
    img, txt = table.get(unit) or table.get("block_joint_last" if unit.endswith("_last") else unit, (0, 0))
    return float((img * image_tokens + txt * text_tokens) * width * max(0, 4 - cb))


def activation_table(family: str, width: int) -> tuple[dict, float]:
    """The calibrated per-token bytes of the family (Wan: the calibrated size nearest in width) and the width ratio."""
    names = [n for n in ACTIVATION_BYTES if n.rstrip("0123456789b") == family or n == family]
    if not names:
        raise ConfigError(
            f"no activation calibration for the {family} family in launcher/plan/coefficients.py; "
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


def unit_coefficients(table: dict, unit: str) -> dict:
    """Calibrated entry of an inventory unit (SD3's last block is the context-pre-only kind, dual or not)."""
    if unit in table:
        return table[unit]
    if unit.endswith("_last"):
        return table["block_joint_last"]
    raise ConfigError(f"no activation calibration for block kind {unit!r}")


def per_row_bytes(coef: dict, size: CallSize, scale: float) -> float:
    return max(0.0, coef["img"] * size.image_tokens + coef["txt"] * size.text_tokens + coef["const"]) * scale


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
    is ``full`` unless the planner resolved it first, ``launcher/plan/choices.py``; ``every_k`` one block in k)."""
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
    if name in ("eam", "diffusion_nft", "awm"):  # the final latent only
        return 1
    if int(method.get("window_size", 0) or 0) and name in ("flow_grpo_fast", "jagg", "mix_grpo"):
        return int(method["window_size"]) + 1
    if name == "flow_dppo" and int(method.get("sde_steps", 0) or 0):  # x_i and x_{i+1} of each drawn step
        return min(n + 1, 2 * int(method["sde_steps"]))
    if name in ("flow_grpo", "grpo_guard", "flow_dppo") or (name == "jagg" and method.get("base") == "flow_grpo"):
        return max(1, min(n - 1, int(float(method["timestep_fraction"]) * n))) + 1
    return n + 1


def kept_means(method: dict) -> int:
    """Transition means per sample the rollout policy leaves for the update (fp32 latents on the device, never
    offloaded): one per trained step for GRPO-Guard and Flow-DPPO (``rollout.extras["old_mean"]``), none elsewhere."""
    name, n = method.get("name"), int(method.get("sampling_steps", 1))
    if name == "flow_dppo" and int(method.get("sde_steps", 0) or 0):
        return int(method["sde_steps"])
    if name in ("grpo_guard", "flow_dppo"):
        return max(1, min(n - 1, int(float(method["timestep_fraction"]) * n)))
    return 0
