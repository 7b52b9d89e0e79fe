"""Config of the held-out evaluation in the trainer (``eval.*``; launcher/train/evaluation.py, docs/evaluation.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from rewardflow.errors import ConfigErrors
from rewardflow.prompts import held_out_count


@dataclass
class EvalConfig:
    """The family's deterministic ODE sampler from fixed initial noise, on prompts held out of training. A model's
    inference settings (``sampling_steps``, ``guidance``) come from conf/inference/<model>.yaml, the demo's held-out
    prompts and cadence from conf/eval/demo.yaml."""

    every: int = 0  # evaluate at step 0, every N steps and at the end; 0 = off
    prompts: Any = None  # held-out prompts: a .txt / .jsonl file (key data.field), an inline list, or a named set
    # (eval.prompts=drawbench: its test split); null: data.set's test split when data.set is a named set
    # or hold out N prompts of `data` (a fixed split; applies even when every=0; 0 = none); null: default_split
    # when evaluating (every > 0) and eval.prompts is unset, else none (held_out_count)
    split: Optional[int] = None
    default_split: int = 0  # what eval.split=null holds out (conf/eval/file.yaml: data=file's default held-out prompts)
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
    # the first N evaluated samples (every prompt's first sample first) written one file each to
    # samples/eval_<k>/ and logged as the rows of a W&B table (docs/evaluation.md#what-a-run-logs); 0 = none. Bounded
    # because a named set is large (GenEval: 553 prompts x 4 samples per evaluation)
    log_samples: int = 64

    @classmethod
    def check(cls, cfg: Any, errors: ConfigErrors) -> None:
        """The rules on ``eval.*`` values alone (run by :func:`launcher.validate.check_config` before torch is
        imported); the prompts, the model's guidance and the rewards on the held-out prompts are checked by
        :meth:`launcher.train.evaluation.Evaluator.check`. ``cfg`` is the run's typed config."""
        e = cfg.eval
        for key in ("every", "split", "default_split", "val_split", "log_samples"):
            value = getattr(e, key)
            errors.require(value is None or value >= 0, f"eval.{key}", f"must be >= 0 (got {value})")
        errors.require(  # an explicit eval.prompts wins over the default split, never over an explicit one
            e.prompts is None or not e.split,
            "eval.split",
            f"eval.prompts and eval.split={e.split} both choose the held-out prompts. Fix: keep one "
            f"(eval.split=null, or eval.prompts=null)",
        )
        errors.require(
            not e.use_ema or cfg.trainer.ema_decay > 0,
            "eval.use_ema",
            "true needs an EMA of the weights. Fix: trainer.ema_decay=0.995 (for example), or eval.use_ema=false",
        )
        errors.require(
            not e.val_split or e.every > 0,
            "eval.val_split",
            f"{e.val_split} scores training prompts at each evaluation, and eval.every=0 runs none. Fix: "
            f"eval.every=N (with held-out prompts), or eval.val_split=0",
        )
        if not e.every:
            return
        errors.require(
            e.prompts is not None or held_out_count(e) > 0 or cfg.data.set is not None,
            "eval.every",
            f"{e.every} evaluates held-out prompts, and none are set. Fix: eval.prompts="
            f"/path/prompts.txt (or a list), or eval.split=N to hold N prompts of data out of "
            f"training; or eval.every=0",
        )
        for key in ("samples_per_prompt", "batch_size"):
            errors.require(getattr(e, key) >= 1, f"eval.{key}", f"must be >= 1 (got {getattr(e, key)})")
        if errors.require(
            e.sampling_steps is not None,
            "eval.sampling_steps",
            f"is not set and model={cfg.model.name} has no inference defaults "
            f"(conf/inference/{cfg.model.name}.yaml). Fix: eval.sampling_steps=N, or eval.every=0",
        ):
            errors.require(e.sampling_steps >= 1, "eval.sampling_steps", f"must be >= 1 (got {e.sampling_steps})")
