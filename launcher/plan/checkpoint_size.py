"""How big a run's checkpoint is and how long writing it takes, without loading a weight: the default of
``cluster.signal_delay_s`` (docs/clusters.md#the-signal-delay).

A checkpoint (launcher/checkpoint/manager.py) holds the trainable weights in fp32 (the whole transformer for full
fine-tuning, the adapters for LoRA), AdamW's two fp32 moments of them, the EMA of them (``trainer.ema_decay`` > 0)
and DiffusionNFT's lagging policy (methods with ``old_decay_rate``): 4 x (1 + 2 + EMA + old) bytes per trainable
parameter. FLUX.1-dev full fine-tuning with an EMA: 11.9 B x 16 = 190 GB.

Time: every rank writes its shard; a node writes ``tasks_per_node`` shards at once through one link to the shared
filesystem, so the time is a node's bytes over :data:`WRITE_BYTES_PER_S_PER_NODE`. A shard is the checkpoint over
the ranks a parameter is sharded over (all ranks under ``fsdp``, one shard group, a node by default, under ``hsdp``:
DCP writes a replicated tensor once, but which rank writes it is not fixed, so the estimate takes the worst case of
the whole group's share on each node). Imports neither torch nor the model libraries.
"""

from __future__ import annotations

import math

from launcher.plan.model_sizes import family_of, transformer_config

#: a conservative sustained write rate of one node to a shared filesystem: NFS over 10 GbE gives about this; Lustre
#: and GPFS clients usually several times more (a site that knows its rate sets cluster.signal_delay_s itself)
WRITE_BYTES_PER_S_PER_NODE = 1.0e9
#: what the second half of the signal delay must hold besides the checkpoint: the rest of the step running when the
#: half is spent (launcher/checkpoint/preemption.py), the ranks' agreement and submitit's requeue
STEP_AND_REQUEUE_S = 120.0


def trainable_params(cfg: dict) -> float | None:
    """Trainable parameters of a composed run (a plain dict): the transformer's for full fine-tuning, the adapters'
    for LoRA; None for a model the planner does not know (the SOC toy)."""
    from models.param_inventory import INVENTORIES

    model = cfg["model"]
    family = family_of(model)
    if family is None:
        return None
    inv = INVENTORIES[family](transformer_config(model, family)[0])
    if model.get("finetune") == "lora":
        return float(inv.lora_params(list(model.get("lora_targets") or []), int(model.get("lora_rank", 0))))
    return float(inv.params)


def checkpoint_bytes(cfg: dict) -> float:
    """Bytes of one whole checkpoint (all ranks together); 0 for a model the planner does not know."""
    trainable = trainable_params(cfg)
    if trainable is None:
        return 0.0
    ema = 1 if float(cfg.get("trainer", {}).get("ema_decay", 0) or 0) > 0 else 0
    old = 1 if "old_decay_rate" in cfg["method"] else 0
    moments = 2 if "adam" in str(cfg.get("optimizer", {}).get("_target_", "adam")).lower() else 1
    return trainable * 4 * (1 + moments + ema + old)


def shards(cluster: dict) -> tuple[int, int]:
    """``(ranks a parameter is sharded over, ranks per node)`` of a cluster config (a plain dict)."""
    per_node = int(cluster.get("tasks_per_node") or 1)
    world = int(cluster.get("nodes") or 1) * per_node
    if cluster.get("mesh", "fsdp") != "hsdp":
        return world, per_node
    return min(world, int(cluster.get("shard_size") or per_node)), per_node


def checkpoint_seconds(cfg: dict) -> float:
    """Seconds one node takes to write its ranks' shards of a checkpoint (module docstring)."""
    group, per_node = shards(cfg["cluster"])
    node_bytes = checkpoint_bytes(cfg) / group * min(per_node, group)
    return node_bytes / WRITE_BYTES_PER_S_PER_NODE


def signal_delay_s(cfg: dict) -> int:
    """The default ``cluster.signal_delay_s``: the guard trains through the first half of the delay and keeps the
    second for the step in progress, the checkpoint and the requeue (launcher/checkpoint/preemption.py), so
    ``2 x (checkpoint seconds + STEP_AND_REQUEUE_S)``, rounded up to a whole minute (SLURM's signal timing is coarse)."""
    return int(60 * math.ceil(2 * (checkpoint_seconds(cfg) + STEP_AND_REQUEUE_S) / 60))
