"""The FLUX.1 adapter on its tiny twin: real loading path, conventions, LoRA reference, pass counters."""

from __future__ import annotations

import pytest
import torch

from methods.flow_grpo import FlowGRPO
from methods.flow_grpo_config import FlowGRPOConfig
from methods.grpo_config import NoiseKernel
from methods.schedule_config import Schedule
from models.backbone_config import Finetune
from models.tiny_flux import TinyFluxBackbone, build_tiny_flux_pipeline, materialize_tiny_flux
from models.tiny_flux_config import TinyFluxModelConfig
from rewardflow.nfe_counter import NFECounter


@pytest.fixture(scope="module")
def lora_flux():
    return TinyFluxBackbone(TinyFluxModelConfig(finetune=Finetune.lora, lora_rank=4), keep_reference=True)


def test_twin_is_saved_and_loaded_through_from_pretrained(twin_cache):
    path = materialize_tiny_flux(twin_cache)
    assert {
        "model_index.json",
        "transformer",
        "vae",
        "text_encoder",
        "text_encoder_2",
        "tokenizer",
        "tokenizer_2",
        "scheduler",
    } <= {p.name for p in path.iterdir()}
    assert materialize_tiny_flux(twin_cache) == path  # cached, not rebuilt
    bb = TinyFluxBackbone(TinyFluxModelConfig(finetune=Finetune.full))
    fresh = build_tiny_flux_pipeline(pretrain_steps=0).transformer.state_dict()
    loaded = bb.transformer.state_dict()
    assert all(torch.equal(fresh[k], loaded[k]) for k in fresh)  # weights are deterministic in the seed
    x = bb.initial_noise(3, torch.Generator().manual_seed(0))
    assert x.shape == (3, 64, 16)  # 32x32 image -> 16x16x4 latent -> 8x8 tokens
    img = bb.decode(x)
    assert img.shape == (3, 3, 32, 32) and 0 <= float(img.min()) and float(img.max()) <= 1


def test_timestep_is_sigma_not_1000_sigma(lora_flux):
    """FluxTransformer2DModel multiplies the timestep by 1000 itself; the adapter must pass sigma in [0, 1]."""
    seen = {}
    h = lora_flux.transformer.register_forward_pre_hook(
        lambda m, a, k: seen.update(t=k["timestep"], g=k["guidance"]), with_kwargs=True
    )
    emb = lora_flux.encode_prompts(["a red square"] * 2)
    with torch.no_grad():
        lora_flux.velocity(lora_flux.initial_noise(2), torch.tensor([0.7, 0.25]), emb)
    h.remove()
    torch.testing.assert_close(seen["t"], torch.tensor([0.7, 0.25]))
    assert torch.equal(seen["g"], torch.full((2,), 3.5))  # FLUX.1-dev embedded guidance


def test_prompt_embeddings_are_cached(lora_flux):
    calls = []
    enc = lora_flux.pipe.text_encoder_2
    h = enc.register_forward_hook(lambda *a: calls.append(1))
    lora_flux.encode_prompts(["a green tree", "a green tree", "a pink car"])
    lora_flux.encode_prompts(["a pink car"])
    h.remove()
    assert len(calls) == 1


def test_disabled_adapter_is_the_base_model_and_kl_is_zero_at_init(lora_flux):
    emb = lora_flux.encode_prompts(["a red square"] * 2)
    x, s = lora_flux.initial_noise(2, torch.Generator().manual_seed(1)), torch.tensor([0.9, 0.4])
    with torch.no_grad():
        v = lora_flux.velocity(x, s, emb)
        with lora_flux.reference():
            v_ref = lora_flux.velocity(x, s, emb)
    assert torch.equal(v, v_ref)  # gaussian LoRA init keeps B = 0
    cfg = FlowGRPOConfig(
        kl_beta=0.1,
        group_size=2,
        prompts_per_step=1,
        sampling_steps=4,
        schedule=Schedule.scheduler,
        noise_kernel=NoiseKernel.flow,
        eta=0.7,
        timestep_fraction=0.99,
    )
    method = FlowGRPO(cfg, lora_flux)
    ro = method.rollout(["a red square"], torch.Generator().manual_seed(0))
    ro.advantages = torch.tensor([1.0, -1.0])
    idx = torch.tensor([0, 1])
    _, stats = method.step_loss(
        ro,
        idx,
        torch.tensor([1, 1]),
        method.velocity_at(ro, idx, torch.tensor([1, 1])),
        method.velocity_at(ro, idx, torch.tensor([1, 1]), reference=True),
    )
    assert torch.equal(stats["kl"], torch.zeros(2))
    # perturb the adapter: the policy moves away from the reference, KL > 0
    with torch.no_grad():
        for n, p in lora_flux.transformer.named_parameters():
            if "lora_B" in n:
                p.add_(0.05)
    _, stats = method.step_loss(
        ro,
        idx,
        torch.tensor([1, 1]),
        method.velocity_at(ro, idx, torch.tensor([1, 1])),
        method.velocity_at(ro, idx, torch.tensor([1, 1]), reference=True),
    )
    assert (stats["kl"] > 0).all()


def test_nfe_counter_counts_samples_in_forward_and_backward():
    lin = torch.nn.Linear(4, 4)
    c = NFECounter(lin, input_key="input")
    with torch.no_grad():
        lin(torch.randn(5, 4))
    out = lin(torch.randn(3, 4))
    lin(torch.randn(2, 4)).sum().backward()
    assert c.snapshot() == (10, 2)
    out.sum().backward()
    assert c.snapshot() == (10, 5)
