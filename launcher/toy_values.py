"""Values that only make sense on the CPU models, flagged when a real family runs with them (issue 27).

The CPU demo's budget (conf/budget/cpu_demo.yaml) is picked by the CPU models only, so a real family composes its
method's recipe; this catches the same values when they come back another way (an override copied from the demo, a
sweep over the demo's settings). It warns, it does not refuse: a sweep may mean it.
"""

from __future__ import annotations

from typing import Any

from launcher.cluster.device_check import is_real_family

#: a real family's ``optimizer.lr`` above this multiple of its method's recipe rate is a toy's rate: the demo's 3e-3
#: is 10x the highest recipe rate (3e-4, LoRA) and 300x the full fine-tuning one (1e-5)
TOY_LR_FACTOR = 10.0


def toy_values(run: Any) -> list[str]:
    """One message per value of ``run`` (the typed config) that only makes sense on a CPU model, naming the key."""
    if not is_real_family(run.model):
        return []
    mode = str(run.model.finetune)
    recipe = float(getattr(run.method.recipe_lr, mode))
    lr = float(run.optimizer.lr)
    if lr <= TOY_LR_FACTOR * recipe:
        return []
    return [
        f"optimizer.lr={lr:g} is {lr / recipe:.0f}x method.recipe_lr.{mode}={recipe:g}, the {run.method.name} recipe's "
        f"rate for model.finetune={mode}: a rate this high is the CPU demo's (conf/budget/cpu_demo.yaml, 3e-3 for a "
        f"tiny twin's random weights); {run.model.name}'s pretrained weights leave what they learnt within a few "
        f"updates. Fix: drop the optimizer.lr override (the recipe's rate), or set one <= {TOY_LR_FACTOR * recipe:g}"
    ]
