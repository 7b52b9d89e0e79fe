"""Config of the held-out evaluation in the trainer (``eval.*``; launcher/train/evaluation.py, docs/evaluation.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass
class EvalConfig:
    """The family's deterministic ODE sampler from fixed initial noise, on prompts held out of training. A model's
    inference settings (``sampling_steps``, ``guidance``) come from conf/inference/<model>.yaml, the demo's held-out
    prompts and cadence from conf/eval/demo.yaml."""

    every: int = 0  # evaluate at step 0, every N steps and at the end; 0 = off
    prompts: Any = None  # held-out prompts: a .txt / .jsonl file (key data.field) or an inline list
    split: int = 0  # or hold out N prompts of `data` (fixed split; applies even when every=0)
    # also score N of the training prompts (a fixed subset, disjoint from the held-out ones) at every evaluation, as
    # val/<reward>/mean: a protocol picks its learning rate on these and reports the held-out score
    # (docs/comparing.md#comparison-protocol); 0 = none
    val_split: int = 0
    samples_per_prompt: int = 2  # fixed initial latents per prompt
    sampling_steps: Optional[int] = None  # set per model by conf/inference/<model>.yaml
    guidance: Optional[float] = None  # null: the model's own (model.guidance / model.guidance_scale)
    rewards: dict[str, Any] = field(default_factory=dict)  # also scored: +reward@eval.rewards.clip=clip
    use_ema: bool = False  # evaluate the EMA weights (needs trainer.ema_decay > 0)
    batch_size: int = 8  # samples per sampler batch on each rank
