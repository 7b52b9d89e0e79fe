"""Chunked rollouts (methods/chunking.py, methods/trajectory.py; docs/memory.md#chunked-rollouts): with
``method.rollout_chunk`` and ``method.decode_chunk`` at their smallest, every method's samples, log-probs, rewards
and gradients equal one call over the whole batch (today's path) within float rounding: 1e-5 relative in fp32 on
the tiny twins with 2 gloo ranks (gradients: 1e-4, see below), 1e-12 in float64 on the SOC toy."""

from __future__ import annotations

import pytest
import torch

from conftest import compose, grad_error
from dist_utils import run_distributed

WHOLE = ["method.rollout_chunk=1000", "method.decode_chunk=1000"]
#: (method overrides, model): every rollout the trainer has; CFG rows counted on the CFG twin
CASES = {
    "dance_grpo": (["method=dance_grpo"], "tiny_qwenimage"),
    "flow_grpo": (["method=flow_grpo", "method.kl_beta=0.04"], "tiny_qwenimage"),
    "flow_grpo_fast": (["method=flow_grpo_fast", "method.window_range=[0,5]"], "tiny_qwenimage"),
    "flash_grpo": (["method=flash_grpo"], "tiny_qwenimage"),
    "grpo_guard": (["method=grpo_guard"], "tiny_qwenimage"),
    # MixGRPO's window, then the DPM-Solver++ tail (chunked velocities) on the compressed grid
    "mix_grpo_flash": (
        ["method=mix_grpo_flash", "method.sampling_steps=10", "method.window_size=2", "method.updates_per_rollout=1"],
        "tiny_qwenimage",
    ),
    "jagg": (["method=jagg", "method.base=flow_grpo", "method.sampling_steps=9", "method.window=4"], "tiny_qwenimage"),
    "eam": (["method=eam", "method.loss_timesteps=2", "method.endpoint_nfe=3"], "tiny_flux"),
    "adjoint_matching": (
        [
            "method=adjoint_matching",
            "method.sampling_steps=6",
            "method.loss_last_steps=2",
            "method.loss_random_steps=1",
        ],
        "tiny_flux",
    ),
    "diffusion_nft": (["method=diffusion_nft", "method.sampling_steps=4"], "tiny_qwenimage"),
}


def one_step(overrides: list[str], run_dir) -> dict:
    """A trainer's step, phase by phase: rollout, rewards, advantages, and the gradients of the first update."""
    from torch.distributed.tensor import DTensor

    from launcher.train.trainer import RunInfo, Trainer

    trainer = Trainer(
        compose(["logger=none", "trainer.sample_every=0", "trainer.threads=1", *overrides]), RunInfo(run_dir=run_dir)
    )
    method, rank = trainer.method, trainer.world.rank
    gen = torch.Generator().manual_seed(7 + rank)
    prompts = trainer.data.batch(0, int(trainer.cfg.method.prompts_per_step))[rank :: trainer.world.world_size]
    rollout = method.rollout(prompts, gen)
    method.score(rollout, trainer.reward)
    method.prepare_update(rollout)
    update = method.update_plan(rollout, gen)[0]
    for mb in update:
        method.backward(rollout, mb, sum(len(m) for m in update))
    grads = {
        n: (p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad).clone()
        for n, p in trainer.backbone.transformer.named_parameters()
        if p.grad is not None
    }
    samples = rollout.decode_latents if rollout.decode_latents is not None else rollout.latents
    samples = samples.full() if hasattr(samples, "full") else samples  # AM keeps its whole trajectory
    return {
        "samples": samples,
        "rewards": rollout.rewards,
        "grads": grads,
        "log_probs": rollout.log_probs,
        "images": rollout.images,
    }


def _compare(rank, world, cases, tmp):
    from pathlib import Path

    out = {}
    for name, (overrides, model) in cases.items():
        base = [
            *overrides,
            f"model={model}",
            "method.group_size=2",
            "method.prompts_per_step=2",
            "method.update_batch=2",
        ]
        if "clip_range" in compose([*overrides]).method:  # a ratio of 1 +- rounding must not flip a PPO clip
            base.append("method.clip_range=0.5")
        whole = one_step([*base, *WHOLE], Path(tmp) / f"{name}-whole-{rank}")
        chunked = one_step(
            [*base, "method.rollout_chunk=1", "method.decode_chunk=1"], Path(tmp) / f"{name}-chunk-{rank}"
        )
        out[name] = (whole, chunked)
    return out


def assert_close(a: torch.Tensor, b: torch.Tensor, rel: float, what: str) -> None:
    scale = float(b.abs().max()) or 1.0
    torch.testing.assert_close(a, b, rtol=rel, atol=rel * scale, msg=lambda m: f"{what}: {m}")


@pytest.fixture(scope="module")
def two_rank_results(tmp_path_factory) -> list[dict]:
    """Every case's whole and chunked step on each of 2 gloo ranks, in one pair of processes (a spawn per case
    would pay the ranks' start-up eight times)."""
    return run_distributed(_compare, 2, CASES, str(tmp_path_factory.mktemp("chunked")), timeout=1800)


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_chunked_rollouts_equal_one_call_over_the_batch_on_two_ranks(case, two_rank_results):
    for rank, per_rank in enumerate(two_rank_results):
        for name, (whole, chunked) in [(case, per_rank[case])]:
            what = f"{name} rank {rank}"
            assert_close(chunked["samples"], whole["samples"], 1e-5, f"{what}: samples")
            assert_close(chunked["rewards"], whole["rewards"], 1e-5, f"{what}: rewards")
            if whole["log_probs"] is not None:
                assert_close(
                    chunked["log_probs"].nan_to_num(), whole["log_probs"].nan_to_num(), 1e-5, f"{what}: log-probs"
                )
            # GRPO's ratio exp(log p - log p_old) turns the rollout log-probs' absolute rounding (they are sums of
            # ~10^3 in size) into a relative change of the gradient of that size: 1e-4, not 1e-5; Flow-GRPO-Fast's
            # CPS step (std sigma_next sin(a pi/2), docs/cps.md) has larger log-probs, so 5e-4; JAGG's group gradient
            # adds the two endpoints' ratio terms with weights over W steps (docs/methods/jagg.md), and with
            # Flow-GRPO's global-std advantages (which cancel more than per-group ones) measured 1.35e-4: 2e-4
            tolerance = {"flow_grpo_fast": 5e-4, "jagg": 2e-4}.get(name, 1e-4)
            assert grad_error(chunked["grads"], whole["grads"]) <= tolerance, what
            assert chunked["images"].dtype == torch.uint8  # 8-bit copies for the image grids
            assert (chunked["images"].int() - whole["images"].int()).abs().max() <= 1, what


@pytest.mark.parametrize("method", ["eam", "adjoint_matching"])
def test_chunked_soc_toy_equals_one_call_in_float64(method, tmp_path):
    toy = [
        f"experiment=toy_{'am' if method == 'adjoint_matching' else 'eam'}",
        "method.group_size=8",
        "method.prompts_per_step=2",
        "method.update_batch=16",
    ]
    whole = one_step([*toy, *WHOLE], tmp_path / "whole")
    chunked = one_step([*toy, "method.rollout_chunk=3", "method.decode_chunk=5"], tmp_path / "chunked")
    assert whole["samples"].dtype == torch.float64
    for key in ("samples", "rewards"):
        assert_close(chunked[key], whole[key], 1e-12, key)
    assert grad_error(chunked["grads"], whole["grads"]) <= 1e-12


def test_image_copies_are_kept_only_on_steps_that_draw_a_grid(tmp_path):
    """``score`` keeps the 8-bit image copies on the steps that draw an image grid (trainer.sample_every, and the last
    step), and on no other: there they would only make a step's host memory grow with its batch."""
    from launcher.train.trainer import RunInfo, Trainer

    cfg = compose(
        ["logger=none", "trainer.steps=3", "trainer.sample_every=2", "trainer.progress=false", "trainer.threads=1"]
    )
    trainer = Trainer(cfg, RunInfo(run_dir=tmp_path))
    seen, score = [], trainer.method.score

    def recording_score(rollout, reward):
        out = score(rollout, reward)
        seen.append((trainer.method.keep_images, rollout.images is not None))
        return out

    trainer.method.score = recording_score
    trainer.fit()
    assert seen == [(True, True), (False, False), (True, True)]  # steps 0 and 2 (the last) draw a grid
    assert sorted(p.name for p in (tmp_path / "samples").glob("step_*.png")) == ["step_00000.png", "step_00002.png"]
