"""method=grpo_guard (docs/methods/grpo_guard.md): the loss equals the reference code's on fixed float64 inputs
(tests/reference/grpo_guard_values.json, made by tests/reference/make_grpo_guard_values.py from
verl-project/verl-omni @a1139ba), the rollout keeps the rollout policy's means in order, the declared passes, two
FSDP2 ranks equal one process, resume is bitwise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from conftest import compose
from dist_utils import run_distributed
from launcher.components import build
from launcher.train.trainer import RunInfo, Trainer
from launcher.validate import validate
from method_checks import crash_and_resume, full_grads, shard
from methods.grpo_guard import GRPOGuard, guard_loss
from rewardflow.errors import ConfigError

SMOKE = ["experiment=smoke", "logger=none", "method=grpo_guard"]
VALUES = json.loads((Path(__file__).parent / "reference" / "grpo_guard_values.json").read_text())


@pytest.mark.parametrize("case", VALUES["cases"], ids=lambda c: f"clip{c['inputs']['clip_range']}")
def test_loss_ratio_and_gradients_equal_the_reference_code(case, float64):
    assert VALUES["reference"]["commit"] == "a1139bafffb5b9711f0a6b6edff8ecaa60bfff30"
    x, want = case["inputs"], case["expected"]
    log_prob = torch.tensor(x["log_prob"], requires_grad=True)
    mean = torch.tensor(x["mean"], requires_grad=True)
    m = log_prob.shape[0]
    loss, stats = guard_loss(
        log_prob,
        torch.tensor(x["old_log_prob"]),
        torch.tensor(x["advantages"]),
        mean,
        torch.tensor(x["old_mean"]),
        torch.full((m,), x["g"]),
        torch.full((m,), x["sqrt_dt"]),
        x["clip_range"],
        x["adv_clip_max"],
    )
    total = loss.mean()  # rows of one step: the mean over rows is the reference's loss
    grad_log_prob, grad_mean = torch.autograd.grad(total, (log_prob, mean))
    tol = dict(rtol=0, atol=1e-6)
    torch.testing.assert_close(total, torch.tensor(want["loss"]), **tol)
    torch.testing.assert_close(stats["ratio"].mean(), torch.tensor(want["ratio_mean"]), **tol)
    torch.testing.assert_close(stats["clipped"].mean(), torch.tensor(want["clipfrac"]), **tol)
    torch.testing.assert_close(grad_log_prob, torch.tensor(want["grad_log_prob"]), **tol)
    torch.testing.assert_close(grad_mean, torch.tensor(want["grad_mean"]), **tol)


def test_without_its_two_parts_it_is_flow_grpos_loss(float64):
    from methods.losses import ppo_clip_loss

    lp, old, adv = torch.tensor([0.1, -0.2, 0.3]), torch.tensor([0.0, 0.0, 0.1]), torch.tensor([1.0, -1.0, 0.5])
    mean = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))
    loss, _ = guard_loss(lp, old, adv, mean, mean + 1, torch.ones(3), torch.ones(3), 0.1, 5.0, False, False)
    torch.testing.assert_close(loss, ppo_clip_loss(lp, old, adv, 0.1)[0])


def _method(overrides=(), parallelize=None) -> GRPOGuard:
    cfg = compose([*SMOKE, *overrides])
    method_cfg = OmegaConf.to_object(cfg.method)
    torch.manual_seed(0)
    backbone = build(cfg.model, "model", keep_reference=GRPOGuard.needs_reference(method_cfg))
    if parallelize is not None:
        parallelize(backbone)
    return GRPOGuard(method_cfg, backbone)


def _scored_rollout(method: GRPOGuard, seed: int = 0):
    rollout = method.rollout(["a red square", "a blue circle"], torch.Generator().manual_seed(seed))
    rollout.rewards = torch.linspace(0.1, 0.9, len(rollout))
    method.prepare_update(rollout)
    return rollout


def test_rollout_keeps_the_rollout_policys_means_of_the_trained_steps():
    """Chunked sampling (rollout_chunk < batch): on policy, before any update, the recomputed means equal the kept
    ones, so RatioNorm's bias is 0 and the ratio 1."""
    method = _method(["method.rollout_chunk=3"])
    rollout = _scored_rollout(method)
    b, t = len(rollout), method.trained_per_sample(method.cfg)
    assert rollout.extras["old_mean"].shape[:2] == (b, t)
    samples = torch.arange(b)
    for j in range(t):
        index = torch.full((b,), j)
        with torch.no_grad():
            v = method.velocity_at(rollout, samples, index)
            _, stats = method.step_loss(rollout, samples, index, v)
        torch.testing.assert_close(stats["ratio_bias"], torch.zeros(b), rtol=0, atol=1e-6)
        torch.testing.assert_close(stats["ratio"], torch.ones(b), rtol=0, atol=1e-5)


@pytest.mark.parametrize("overrides", [[], ["method.kl_beta=0"]])
def test_pass_counts_per_step_are_the_declared_ones(tmp_path, overrides):
    cfg = compose([*SMOKE, "trainer.steps=1", *overrides])
    row = Trainer(cfg, RunInfo(run_dir=tmp_path)).train_step(0)
    fwd, bwd = GRPOGuard.passes_per_sample(cfg.method)
    samples = cfg.method.group_size * cfg.method.prompts_per_step
    assert (row["count/transformer_fwd"], row["count/transformer_bwd"]) == (samples * fwd, samples * bwd)


def test_cps_is_rejected_before_anything_is_built():
    with pytest.raises(ConfigError, match="method.noise_kernel"):
        validate(compose([*SMOKE, "method.noise_kernel=cps", "method.eta=0.8"]))


@pytest.mark.slow
def test_interrupted_run_resumes_bitwise(tmp_path):
    cfg = compose([*SMOKE, "trainer.steps=4", "trainer.ckpt_every=2", "model.finetune=lora", "model.lora_rank=4"])
    crash_and_resume(cfg, tmp_path)


def _sharded_work(rank, world, overrides):
    method = _method(overrides, parallelize=shard)
    rollout = _scored_rollout(method)  # every rank draws the same rollout (same seed)
    mine = torch.arange(len(rollout))[rank::world]  # each rank trains its half
    method.backbone.transformer.zero_grad(set_to_none=True)
    method.backward(rollout, mine, len(mine))
    return rollout.extras["old_mean"], full_grads(method.backbone.transformer)


@pytest.mark.slow
def test_two_sharded_ranks_equal_one_process():
    overrides = ["model.finetune=lora", "model.lora_rank=4", "model.reference_dtype=float32"]
    old_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        method = _method(overrides)
        rollout = _scored_rollout(method)
        method.backbone.transformer.zero_grad(set_to_none=True)
        method.backward(rollout, torch.arange(len(rollout)), len(rollout))
        single = full_grads(method.backbone.transformer)
        ranks = run_distributed(_sharded_work, 2, overrides)
    finally:
        torch.set_num_threads(old_threads)
    for means, grads in ranks:
        torch.testing.assert_close(means, rollout.extras["old_mean"], rtol=1e-5, atol=1e-6)
        assert grads.keys() == single.keys()
        for k, v in single.items():
            torch.testing.assert_close(grads[k], v, rtol=1e-4, atol=1e-7, msg=k)
