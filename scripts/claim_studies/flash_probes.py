"""Measurements of a Flash-GRPO trainer that do not train: the k* effect on the reward (the study's precondition) and
the gradient norm of each sample by its SDE step (what rectification is meant to equalise).

Both drive the method's own rollout, scoring, advantages and backward, and leave the trainer as they found it: the
draws use their own generator, the method's settings are restored, the gradients are cleared and the method's
diagnostics flushed.
"""

from __future__ import annotations

import contextlib

import torch


@contextlib.contextmanager
def method_settings(method, pool: list[int] | None = None, **cfg_values):
    """Temporarily run ``method`` (a FlashGRPO) with another SDE pool and other values of its typed config."""
    saved_pool, saved = method.pool, {k: getattr(method.cfg, k) for k in cfg_values}
    try:
        if pool is not None:
            method.pool = list(pool)
        for k, v in cfg_values.items():
            setattr(method.cfg, k, v)
        yield method
    finally:
        method.pool = saved_pool
        for k, v in saved.items():
            setattr(method.cfg, k, v)
        method.diagnostics.flush()


def kstar_effect(trainer, pool: list[int], groups_per_cell: int, prompts: int | None = None, seed: int = 99) -> dict:
    """How much a group's expected reward depends on its SDE step k*, on the trainer's current model.

    For every prompt of the data (or its first ``prompts``) and every ``k`` of ``pool``, ``groups_per_cell`` groups of
    G rollouts with their SDE step at ``k``, twice: with fresh initial noise per rollout (the paper's setting) and with one initial latent per
    group (so the spread within a group is the SDE step's alone).

    Returns ``between_over_noise``: the variance across k* of a group's expected mean reward (prompt by prompt, the
    estimation noise of the cell means subtracted, averaged over prompts) over the sampling variance of one group's
    mean (within-cell variance / G); ``xi_share``: the within-group variance with a shared initial latent over the
    within-cell variance with fresh ones; ``per_k``: mean reward (and its standard error) per k*.
    """
    method, g = trainer.method, int(trainer.method.cfg.group_size)
    prompts = list(trainer.prompts)[:prompts]
    gen = torch.Generator().manual_seed(seed)
    fresh: dict[tuple[int, int], list[float]] = {}
    shared_within: list[float] = []
    for k in pool:
        for share in (False, True):
            with method_settings(method, pool=[k], init_same_noise=share):
                for _ in range(groups_per_cell):
                    rollout = method.rollout(prompts, gen)
                    rewards = method.score(rollout, trainer.reward).double().view(len(prompts), g)
                    for p in range(len(prompts)):
                        if share:
                            shared_within.append(float(rewards[p].var()))
                        else:
                            fresh.setdefault((p, k), []).extend(rewards[p].tolist())
    n_prompts = len(prompts)
    cell_mean = torch.tensor([[sum(fresh[p, k]) / len(fresh[p, k]) for k in pool] for p in range(n_prompts)])
    cell_var = torch.tensor([[torch.tensor(fresh[p, k]).var().item() for k in pool] for p in range(n_prompts)])
    n_cell = len(fresh[0, pool[0]])
    between = float((cell_mean.var(dim=1, unbiased=True) - cell_var.mean(dim=1) / n_cell).mean())
    noise = float(cell_var.mean()) / g
    per_k = [
        {
            "k": k,
            "mean_reward": float(cell_mean[:, j].mean()),
            "se": float((cell_var[:, j].mean() / (n_cell * n_prompts)) ** 0.5),
        }
        for j, k in enumerate(pool)
    ]
    return {
        "between_k_var": between,
        "group_mean_noise_var": noise,
        "between_over_noise": between / noise,
        "xi_share": (sum(shared_within) / len(shared_within)) / float(cell_var.mean()),
        "per_k": per_k,
        "samples": n_cell * n_prompts * len(pool) * 2,
    }


def per_kstar_gradient_norms(trainer, seed: int = 7) -> dict[int, list[float]]:
    """Per-sample gradient norm per unit advantage, ``|grad of sample i's weighted loss| / |A_i|``, grouped by k*.

    One rollout covers the pool (``sde_index_sampling=stratified``: with iso-temporal grouping each group gets a
    different k*), then the method's own advantages, update plan (which fixes the rectification weights over each
    update) and backward, one sample at a time, before any optimizer step (ratio 1). Unrectified, the norm carries
    lambda(t_k*); rectified, the weight ``(1/lambda) / mean(1/lambda)`` should remove it.
    """
    method = trainer.method
    gen = torch.Generator().manual_seed(seed)
    groups = max(len(method.pool), len(trainer.prompts))
    prompts = [trainer.prompts[i % len(trainer.prompts)] for i in range(groups)]
    out: dict[int, list[float]] = {}
    params = [p for p in trainer.params]
    with method_settings(method, sde_index_sampling="stratified"):
        trainer.optimizer.zero_grad(set_to_none=True)
        rollout = method.rollout(prompts, gen)
        method.score(rollout, trainer.reward)
        method.prepare_update(rollout)
        method.update_plan(rollout, gen)
        for i in range(len(rollout)):
            adv = float(rollout.advantages[i])
            if abs(adv) < 1e-6:
                continue
            method.backward(rollout, torch.tensor([i]), 1)
            grads = [p.grad for p in params if p.grad is not None]
            norm = float(torch.nn.utils.get_total_norm(grads)) if grads else 0.0
            trainer.optimizer.zero_grad(set_to_none=True)
            out.setdefault(int(rollout.train_steps[i, 0]), []).append(norm / abs(adv))
    return out
