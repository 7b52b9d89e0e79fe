"""Host memory (RAM) of one rank, without loading a weight: the default of ``cluster.mem_gb``
(docs/clusters.md#host-memory).

Each rank is its own process and holds on the host, at its peak (docs/clusters.md#host-memory):

* the runtime: Python, torch, the CUDA and NCCL libraries and their host buffers (:data:`RUNTIME_BYTES`);
* the text encoders (loaded on the host; ``offload`` keeps them there between encodings, ``device`` and
  ``precompute`` hold them there while loading), in the compute dtype;
* the VAE and the reward model, loaded in fp32 on the host before they move to the device;
* the transformer whole in fp32 when the job has one rank (``from_pretrained``); with several ranks the sharded
  start-up reads only each rank's slices (models/sharded_load.py);
* the prompt-embedding cache (``model.prompt_cache_gib`` / ``prompt_cache_size``);
* the offloaded trajectory states (``method.trajectory_offload``, pinned host memory);
* the rank's shard of a checkpoint staged on the host (``trainer.async_checkpoint``).

A node asks for ``tasks_per_node`` x that x :data:`MARGIN` (page cache of the weight files, allocator slack).
FLUX.1-dev with T5 offloaded and HPS on 8 ranks: about 20 GiB per rank, 200 GiB per node. Imports neither torch nor
the model libraries.
"""

from __future__ import annotations

import math

from launcher.plan.activations import kept_states
from launcher.plan.checkpoint_size import checkpoint_bytes, shards
from launcher.plan.model_sizes import (
    DTYPE_BYTES,
    REWARD_PARAMS,
    call_size,
    component_params,
    family_of,
    transformer_config,
)

GiB = float(2**30)
#: resident memory of a CUDA torch process before any model: interpreter, torch and CUDA libraries, NCCL's and the
#: CUDA context's host allocations (3-5 GiB typically)
RUNTIME_BYTES = 5.0 * GiB
#: a node's request over the sum of its ranks' estimates
MARGIN = 1.25
#: entries assumed for an unbounded prompt cache (model.prompt_cache_size=null and prompt_cache_gib=null)
UNBOUNDED_CACHE_ENTRIES = 4096


def host_lines(cfg: dict) -> list[tuple[str, float]]:
    """``(what, bytes)`` per rank of a composed run (a plain dict, ``OmegaConf.to_container(cfg, resolve=True)``)."""
    from models.param_inventory import INVENTORIES

    lines = [("runtime (Python, torch, CUDA libraries)", RUNTIME_BYTES)]
    model, method = cfg["model"], cfg["method"]
    family = family_of(model)
    if family is None:  # the SOC toy: a few MB of model
        return lines
    on_gpu = model.get("device", "auto") != "cpu"
    dtype = model.get("dtype", "auto")
    cb = DTYPE_BYTES[dtype] if dtype != "auto" else (2 if on_gpu else 4)
    tconfig = transformer_config(model, family)[0]
    counts = component_params(model, family)
    group, per_node = shards(cfg["cluster"])
    world = int(cfg["cluster"].get("nodes") or 1) * per_node
    lines += [
        ("text encoders", counts["text_encoders"] * cb),
        ("VAE (fp32 while loading)", counts["vae"] * 4),
        ("reward model (fp32 while loading)", _reward_params(cfg["reward"]) * 4),
    ]
    if world == 1:
        lines.append(("transformer, loaded whole (one rank)", INVENTORIES[family](tconfig).params * 4))
    size = call_size(model, family, tconfig)
    entry = size.text_tokens * (tconfig.get("joint_attention_dim") or tconfig.get("text_dim") or 0) * cb
    entries, gib = model.get("prompt_cache_size", UNBOUNDED_CACHE_ENTRIES), model.get("prompt_cache_gib")
    cache = (UNBOUNDED_CACHE_ENTRIES if entries is None else int(entries)) * entry
    lines.append(("prompt-embedding cache", cache if gib is None else min(cache, float(gib) * GiB)))
    if method.get("trajectory_offload"):
        samples = math.ceil(int(method["prompts_per_step"]) / world) * int(method.get("group_size", 1))
        lines.append(("offloaded trajectory states", samples * size.latent_elements * 4 * kept_states(method)))
    if cfg.get("trainer", {}).get("async_checkpoint"):
        lines.append(("checkpoint staged for an asynchronous save", checkpoint_bytes(cfg) / group))
    return lines


def host_bytes_per_rank(cfg: dict) -> float:
    return sum(nbytes for _, nbytes in host_lines(cfg))


def mem_gb(cfg: dict) -> int:
    """The default ``cluster.mem_gb``: the node's ranks' host memory with :data:`MARGIN`, in whole GiB (SLURM reads
    ``--mem=<n>GB`` as GiB)."""
    per_node = int(cfg["cluster"].get("tasks_per_node") or 1)
    return int(math.ceil(per_node * host_bytes_per_rank(cfg) * MARGIN / GiB))


def _reward_params(reward: dict) -> float:
    if "components" in reward:
        return sum(_reward_params({"name": n, **(c or {})}) for n, c in reward["components"].items())
    return REWARD_PARAMS.get(str(reward.get("name")), 0.0)
