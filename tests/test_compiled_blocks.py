"""model.compile=true (docs/performance.md#compiled-blocks): every transformer block compiled in place gives the eager
model's velocities and gradients (within 1e-5) on the CPU, at two row counts (the second one recompiles), and keeps
the parameter names that LoRA, checkpoints and exports rely on. Compiling takes minutes on a small CPU."""

from __future__ import annotations

import pytest
import torch

from conftest import compose
from families import FAMILIES
from launcher.validate import validate
from models.compiled_blocks import compile_blocks, compile_unavailable_reason
from rewardflow.errors import ConfigError

pytestmark = pytest.mark.skipif(
    compile_unavailable_reason(torch.device("cpu")) is not None,
    reason=str(compile_unavailable_reason(torch.device("cpu"))),
)


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_compiled_blocks_equal_the_eager_model(twin_cache):
    torch.manual_seed(0)
    eager = FAMILIES["tiny_flux"].build(finetune="full")
    torch.manual_seed(0)
    compiled = FAMILIES["tiny_flux"].build(finetune="full", compile=True)
    assert compiled.compiled and [n for n, _ in compiled.transformer.named_parameters()] == [
        n for n, _ in eager.transformer.named_parameters()
    ]
    embeds = eager.encode_prompts(["a red square", "a blue sky", "a cat"])
    for rows in (2, 3):
        x = eager.initial_noise(rows, torch.Generator().manual_seed(rows))
        sigma = torch.linspace(0.2, 0.9, rows)
        results = []
        for bb in (eager, compiled):
            bb.transformer.zero_grad(set_to_none=True)
            v = bb.velocity(x, sigma, embeds.select(list(range(rows))))
            v.square().mean().backward()
            results.append((v.detach(), [p.grad for p in bb.transformer.parameters()]))
        (v_eager, g_eager), (v_compiled, g_compiled) = results
        torch.testing.assert_close(v_compiled, v_eager, rtol=1e-5, atol=1e-5)
        for a, b in zip(g_compiled, g_eager):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_compile_refuses_a_device_it_cannot_compile_for(monkeypatch):
    import models.compiled_blocks as cb

    monkeypatch.setattr(cb.shutil, "which", lambda name: None)
    with pytest.raises(ConfigError, match="model.compile=true: inductor needs a C\\+\\+ compiler"):
        compile_blocks([torch.nn.Linear(2, 2)], torch.device("cpu"))


def test_compile_without_a_compiler_is_a_config_error_before_any_model_is_built(monkeypatch, no_model_building):
    import models.compiled_blocks as cb

    monkeypatch.setattr(cb.shutil, "which", lambda name: None)
    with pytest.raises(ConfigError, match="model.compile: .*C\\+\\+ compiler.*Fix: model.compile=false"):
        validate(compose(["model=tiny_flux", "model.device=cpu", "model.compile=true"]))
