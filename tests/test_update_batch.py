"""Batched trained steps (docs/performance.md#batched-trained-steps): for every method, an update's gradient with
``method.update_batch`` rows per transformer call equals the row-at-a-time path (float64, relative error <= 1e-10),
its statistics too, while the transformer is called fewer times over the same rows.

The tiny FLUX twin runs in float64 here (its transformer cast to float64 and fed float64 inputs), on the methods'
own rollouts; only the packing of rows into calls differs between the two runs.
"""

from __future__ import annotations

import pytest
import torch

from conftest import compose
from launcher.components import build
from rewardflow.nfe_counter import NFECounter
from rewards.color import ColorReward
from rewards.color_config import ColorRewardConfig

PROMPTS = ["a red square", "a blue circle"]
METHODS = {  # method -> overrides (small, and each exercising its packing: JAGG with a JAGG and an exact group, ...)
    "dance_grpo": ["method.sampling_steps=6", "method.timestep_fraction=0.8"],
    "flow_grpo": ["method.sampling_steps=5", "method.kl_beta=0.04"],
    "flow_grpo_fast": ["method.sampling_steps=6", "method.window_size=2", "method.window_range=[0,4]"],
    "jagg": ["method.sampling_steps=9", "method.jagg_frac=0.6"],
    "jagg_flow_kl": [
        "method=jagg",
        "method.base=flow_grpo",
        "method.sampling_steps=9",
        "method.kl_beta=0.04",
        "method.jagg_frac=1",
    ],
    "flash_grpo": ["method.sampling_steps=6"],
    "grpo_guard": ["method.sampling_steps=5"],
    "mix_grpo_flash": ["method.sampling_steps=10", "method.window_size=3"],  # MixGRPO's update after the Flash rollout
    "eam": ["method.endpoint_nfe=2", "method.loss_timesteps=3"],
    "adjoint_matching": [
        "method.sampling_steps=4",
        "method.loss_last_steps=2",
        "method.loss_random_steps=1",
        "method.loss_clip=1.6",
    ],
    "diffusion_nft": ["method.sampling_steps=3", "method.timestep_fraction=1.0", "method.kl_beta=0.01"],
}


def _float64_inputs(module, args, kwargs):
    cast = lambda v: v.double() if torch.is_tensor(v) and v.is_floating_point() else v  # noqa: E731
    return tuple(cast(a) for a in args), {k: cast(v) for k, v in kwargs.items()}


@pytest.fixture(scope="module")
def backbone():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    bb = build(
        compose(["model=tiny_flux", "model.finetune=lora", "model.lora_rank=4"]).model, "model", keep_reference=True
    )
    bb.transformer.double()
    handle = bb.transformer.register_forward_pre_hook(_float64_inputs, with_kwargs=True)
    yield bb
    handle.remove()
    torch.set_num_threads(old)


def _method(name: str, backbone):
    overrides = METHODS[name]
    chosen = [o for o in overrides if o.startswith("method=")] or [f"method={name}"]
    cfg = compose(
        [
            *chosen,
            "method.group_size=3",
            "method.prompts_per_step=2",
            "method.updates_per_rollout=1",
            *[o for o in overrides if not o.startswith("method=")],
        ]
    )
    return build(cfg.method, "method", backbone)


def _update_gradient(method, rollout, samples, update_batch):
    method.cfg.update_batch = update_batch
    net = method.backbone.transformer
    net.zero_grad(set_to_none=True)
    counter = NFECounter(net)
    calls = []
    handle = net.register_forward_hook(lambda *a: calls.append(1))
    stats = method.backward(rollout, samples, len(samples))
    handle.remove()
    counter.remove()
    grads = torch.cat([p.grad.flatten() for p in net.parameters() if p.grad is not None])
    return grads, {k: float(v) for k, v in stats.items()}, len(calls), counter.snapshot()


@pytest.mark.parametrize("name", list(METHODS))
def test_batched_update_gradient_equals_the_row_at_a_time_gradient(name, backbone):
    method = _method(name, backbone)
    gen = torch.Generator().manual_seed(0)
    rollout = method.rollout(PROMPTS, gen)
    method.score(rollout, ColorReward(ColorRewardConfig()))
    method.prepare_update(rollout)
    [[samples]] = method.update_plan(rollout, torch.Generator().manual_seed(1))

    one, stats_one, calls_one, passes_one = _update_gradient(method, rollout, samples, update_batch=1)
    many, stats_many, calls_many, passes_many = _update_gradient(method, rollout, samples, update_batch=8)
    assert one.abs().max() > 0
    assert float((many - one).norm() / one.norm()) <= 1e-10  # measured: 7e-16 .. 1.1e-15
    assert stats_many.keys() == stats_one.keys() and "loss" in stats_one
    for key in stats_one:  # fp32 per-row terms (the family returns fp32 velocities), summed in another order
        assert stats_many[key] == pytest.approx(stats_one[key], rel=1e-6, abs=1e-6), key
    assert passes_many == passes_one  # the same rows: same forward and backward row counts
    assert calls_many < calls_one  # ... in fewer transformer calls
