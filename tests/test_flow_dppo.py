"""method=flow_dppo (docs/methods/flow_dppo.md): the KL, the mask, the loss, its gradients, the std the KL divides by
and the recipe's SDE steps equal the authors' code on fixed float64 inputs (tests/reference/flow_dppo_values.json,
made by tests/reference/make_flow_dppo_values.py from Tencent-Hunyuan/UniRL @1a7b501, the loss cross-checked with
verl-project/verl-omni @a1139ba); the kept and the replayed old means; the declared passes; two FSDP2 ranks equal one
process; resume is bitwise."""

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
from method_checks import at_iteration, crash_and_resume, full_grads, shard
from methods.flow_dppo import FlowDPPO
from methods.flow_dppo_config import KLStd, sde_pool
from methods.flow_dppo_loss import dppo_loss, kl_sigma, sde_step_draw
from methods.sde import FlowSDEScheduler
from rewardflow.errors import ConfigError

SMOKE = ["experiment=smoke", "logger=none", "method=flow_dppo"]
VALUES = json.loads((Path(__file__).parent / "reference" / "flow_dppo_values.json").read_text())
TOL = dict(rtol=0, atol=1e-6)


def _rows(case):
    """The reference's (B, S') rows, sample-major, as one call of (B S') rows."""
    x = case["inputs"]
    b, s = len(x["advantages"]), len(x["steps"])
    sde = FlowSDEScheduler(torch.tensor(x["sigmas"]), "flow", x["eta"])
    index = torch.tensor(x["steps"]).repeat(b)
    means = torch.tensor(x["new_means"])
    return (
        torch.tensor(x["new_logp"]).reshape(-1).requires_grad_(True),
        torch.tensor(x["old_logp"]).reshape(-1),
        torch.tensor(x["advantages"]).repeat_interleave(s),
        means.reshape(b * s, *means.shape[2:]).requires_grad_(True),
        torch.tensor(x["old_means"]).reshape(b * s, *means.shape[2:]),
        kl_sigma(sde, index, KLStd(x["kind"])),
    )


@pytest.mark.parametrize("case", VALUES["loss_cases"], ids=lambda c: c["inputs"]["kind"])
def test_kl_mask_loss_and_gradients_equal_the_authors_code(case, float64):
    assert VALUES["reference"]["commit"] == "1a7b501e8fe8517b432a130220d2ff462f9b5afa"
    want = case["expected"]
    log_prob, old_log_prob, adv, mean, old_mean, sigma_t = _rows(case)
    s = len(case["inputs"]["steps"])
    # the std its KL divides by (float32 in UniRL's _compute_sigma_t: 1e-7 relative)
    torch.testing.assert_close(sigma_t[:s], torch.tensor(want["sigma_t"]), rtol=1e-6, atol=0)
    loss, stats = dppo_loss(log_prob, old_log_prob, adv, mean, old_mean, sigma_t, case["inputs"]["threshold"])
    total = loss.mean()  # the reference's loss_per_elem.mean() over (sample, step)
    grad_log_prob, grad_mean = torch.autograd.grad(total, (log_prob, mean), allow_unused=True)
    torch.testing.assert_close(stats["dppo/kl_old"], torch.tensor(want["kl"]).reshape(-1), rtol=1e-6, atol=0)
    torch.testing.assert_close(loss, torch.tensor(want["loss_per_elem"]).reshape(-1), **TOL)
    torch.testing.assert_close(total, torch.tensor(want["loss"]), **TOL)
    torch.testing.assert_close(grad_log_prob, torch.tensor(want["grad_new_logp"]).reshape(-1), **TOL)
    assert grad_mean is None and want["grad_new_means_is_zero"]  # the mask carries no gradient
    dropped = torch.tensor(want["loss_per_elem"]).reshape(-1) == 0  # every advantage is non-zero
    assert torch.equal(stats["clipped"].bool(), dropped) and 0 < int(dropped.sum()) < len(dropped)
    for key, mine in (("masked_fraction", stats["clipped"]), ("kl_mask_fraction", stats["dppo/kl_high_frac"])):
        torch.testing.assert_close(mine.mean(), torch.tensor(want[key]), **TOL)
    torch.testing.assert_close(stats["ratio"].mean(), torch.tensor(want["ratio_mean"]), **TOL)
    torch.testing.assert_close(stats["approx_kl"].mean(), torch.tensor(want["approx_kl"]), **TOL)
    if "verl_omni" in want:  # verl-omni's FlowDPPOLoss, one call per step
        torch.testing.assert_close(total, torch.tensor(want["verl_omni"]["loss"]), **TOL)
        torch.testing.assert_close(grad_log_prob, torch.tensor(want["verl_omni"]["grad_new_logp"]).reshape(-1), **TOL)


def test_below_the_threshold_it_is_the_unclipped_surrogate(float64):
    lp, old, adv = torch.tensor([0.5, -0.5, 0.5, -0.5]), torch.zeros(4), torch.tensor([1.0, -1.0, -1.0, 1.0])
    mean = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
    loss, stats = dppo_loss(lp, old, adv, mean, mean + 1.0, torch.ones(4), 1.0)  # KL = 0.5 < 1: all kept
    torch.testing.assert_close(loss, -adv * lp.exp())
    loss, stats = dppo_loss(lp, old, adv, mean, mean + 1.0, torch.ones(4), 0.5)  # KL = 0.5: the two moving away
    assert stats["clipped"].tolist() == [1.0, 1.0, 0.0, 0.0]
    torch.testing.assert_close(loss, torch.tensor([0.0, 0.0, 0.5, -0.5]).exp() * torch.tensor([0, 0, 1, -1]))


@pytest.mark.parametrize("case", VALUES["sde_step_cases"], ids=lambda c: f"N{c['sampling_steps']}k{c['sde_steps']}")
def test_sde_steps_are_the_authors_schedulers(case):
    first, stop = sde_pool(case["sampling_steps"], case["sde_range"])
    mine = [sde_step_draw(it, case["sampling_steps"], case["sde_steps"], first, stop) for it in range(20)]
    assert mine == case["draws"]


def test_config_errors_before_anything_is_built():
    with pytest.raises(ConfigError, match="method.sde_range"):
        validate(compose([*SMOKE, "method.sde_range=[0.5,1.0]"]))  # the last step is never trained
    with pytest.raises(ConfigError, match="method.kl_mask_threshold"):
        validate(compose([*SMOKE, "method.kl_mask_threshold=0"]))


def _method(overrides=(), parallelize=None) -> FlowDPPO:
    cfg = compose([*SMOKE, *overrides])
    method_cfg = OmegaConf.to_object(cfg.method)
    torch.manual_seed(0)
    backbone = build(cfg.model, "model", keep_reference=FlowDPPO.needs_reference(method_cfg))
    if parallelize is not None:
        parallelize(backbone)
    return FlowDPPO(method_cfg, backbone)


def _scored_rollout(method: FlowDPPO, seed: int = 0):
    rollout = method.rollout(["a red square", "a blue circle"], torch.Generator().manual_seed(seed))
    rollout.rewards = torch.linspace(0.1, 0.9, len(rollout))
    method.prepare_update(rollout)
    return rollout


@pytest.mark.parametrize("sde_steps", [0, 2])
def test_kept_means_equal_the_replayed_ones_on_policy(sde_steps):
    """Chunked sampling (rollout_chunk < batch) keeps the trained steps' means in order; before any update they equal
    the replayed ones, so the KL is 0 and the ratio 1."""
    common = ["method.rollout_chunk=3", f"method.sde_steps={sde_steps}"]
    kept = _scored_rollout(_method([*common, "method.old_means=rollout"]))
    replayed = _scored_rollout(_method([*common, "method.old_means=replay", "method.old_log_probs=replay"]))
    b, t = len(kept), FlowDPPO.trained_per_sample(OmegaConf.to_object(compose([*SMOKE, *common]).method))
    assert kept.extras["old_mean"].shape[:2] == (b, t) and torch.equal(kept.train_steps, replayed.train_steps)
    torch.testing.assert_close(kept.extras["old_mean"], replayed.extras["old_mean"], rtol=0, atol=1e-6)
    torch.testing.assert_close(kept.log_probs, replayed.log_probs, rtol=0, atol=1e-5, equal_nan=True)
    if sde_steps:  # ODE outside the drawn steps: no log-prob there
        stochastic = torch.isfinite(kept.log_probs[0]).nonzero().flatten()
        assert stochastic.tolist() == kept.train_steps[0].tolist()


@pytest.mark.parametrize("overrides", [[], ["method.old_means=rollout"], ["method.sde_steps=0", "method.kl_beta=0.04"]])
def test_pass_counts_per_step_are_the_declared_ones(tmp_path, overrides):
    cfg = compose([*SMOKE, "trainer.steps=1", *overrides])
    row = Trainer(cfg, RunInfo(run_dir=tmp_path)).train_step(0)
    fwd, bwd = FlowDPPO.passes_per_sample(cfg.method)
    samples = cfg.method.group_size * cfg.method.prompts_per_step
    assert (row["count/transformer_fwd"], row["count/transformer_bwd"]) == (samples * fwd, samples * bwd)
    assert "dppo/kl_old" in row and "dppo/kl_high_frac" in row


def test_the_memory_plan_counts_the_kept_states_and_old_means():
    from launcher.plan.memory_plan import plan

    def buffers(*overrides):
        cfg = OmegaConf.to_container(compose(["model=sd35m", *overrides]), resolve=True)
        return next(line for line in plan(cfg).lines if line.what == "rollout buffers")

    dppo, rollout_means = buffers("method=flow_dppo"), buffers("method=flow_dppo", "method.old_means=rollout")
    assert dppo.note.endswith("6 state(s) each, 3 old mean(s)") and dppo.rollout == rollout_means.rollout
    assert buffers("method=flow_dppo", "method.sde_steps=0").note.endswith("10 state(s) each, 9 old mean(s)")
    assert buffers("method=grpo_guard").note.endswith("10 state(s) each, 9 old mean(s)")
    assert buffers("method=flow_grpo").note.endswith("10 state(s) each")


@pytest.mark.slow
def test_interrupted_run_resumes_bitwise(tmp_path):
    """The SDE steps are drawn per training iteration: the resumed run draws the uninterrupted run's."""
    cfg = compose(
        [
            *SMOKE,
            "trainer.steps=4",
            "trainer.ckpt_every=2",
            "model.finetune=lora",
            "model.lora_rank=4",
            "method.sde_steps=2",
        ]
    )  # 2 of the pool [0, 3): each iteration draws its own
    crash_and_resume(cfg, tmp_path, on_resume=at_iteration(2))


def _sharded_work(rank, world, overrides):
    method = _method(overrides, parallelize=shard)
    rollout = _scored_rollout(method)  # every rank draws the same rollout (same seed) and replays it
    mine = torch.arange(len(rollout))[rank::world]  # each rank trains its half
    method.backbone.transformer.zero_grad(set_to_none=True)
    method.backward(rollout, mine, len(mine))
    return rollout.extras["old_mean"], full_grads(method.backbone.transformer)


@pytest.mark.slow
def test_two_sharded_ranks_equal_one_process():
    overrides = ["model.finetune=lora", "model.lora_rank=4"]
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
