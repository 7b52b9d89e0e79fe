"""model.activation_checkpointing=none|full|every_k|auto (docs/performance.md#activation-checkpointing): on every
family's tiny twin the chosen blocks, and only they, run their forward again in the backward, and every setting
gives the gradients of no checkpointing; bad values are config errors before any model is built."""

from __future__ import annotations

import pytest
import torch

from conftest import compose
from families import FAMILIES, NAMES
from launcher.validate import validate
from models.activation_checkpointing import apply_activation_checkpointing, checkpointed_blocks
from rewardflow.errors import ConfigError

PROMPTS = ["a red square", "a photo of a blue circle"]


def test_every_k_checkpoints_one_block_of_every_k_in_forward_order():
    assert checkpointed_blocks(7, "none") == []
    assert checkpointed_blocks(7, "full") == list(range(7))
    assert checkpointed_blocks(7, "every_k", 2) == [1, 3, 5]
    assert checkpointed_blocks(7, "every_k", 3) == [2, 5]
    assert checkpointed_blocks(7, "every_k", 1) == list(range(7))


@pytest.mark.parametrize("name", NAMES)
def test_chosen_blocks_are_recomputed_and_gradients_do_not_change(name, twin_cache):
    torch.manual_seed(0)
    bb = FAMILIES[name].build(finetune="lora", lora_rank=4)
    blocks = bb.transformer_blocks()
    x, s = bb.initial_noise(2, torch.Generator().manual_seed(4)), torch.tensor([0.8, 0.3])
    emb = bb.encode_prompts(PROMPTS)
    params = list(bb.trainable_parameters())
    runs = [0] * len(blocks)
    # pre-hooks: a recomputation stops as soon as it has rebuilt what the backward needs, before the block returns
    hooks = [
        b.register_forward_pre_hook(lambda *a, i=i: runs.__setitem__(i, runs[i] + 1)) for i, b in enumerate(blocks)
    ]

    def forward_backward():
        runs[:] = [0] * len(blocks)
        for p in params:
            p.grad = None
        bb.velocity(x, s, emb).square().mean().backward()
        return [None if p.grad is None else p.grad.clone() for p in params]  # Qwen-Image: some LoRA get none

    results = {}
    for mode in ("none", "full", "every_k"):
        chosen = apply_activation_checkpointing(bb.transformer, blocks, mode, 2)
        results[mode] = forward_backward()
        assert runs == [2 if i in chosen else 1 for i in range(len(blocks))], mode
    for h in hooks:
        h.remove()
    assert len(checkpointed_blocks(len(blocks), "every_k", 2)) == len(blocks) // 2
    plain = results["none"]
    assert sum(g is not None for g in plain) > len(plain) // 2
    for mode in ("full", "every_k"):
        for a, b in zip(plain, results[mode]):
            assert (a is None) == (b is None)
            if a is not None:
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)


def test_auto_is_full_and_the_setting_is_built_into_the_backbone(twin_cache):
    bb = FAMILIES["tiny_flux"].build(finetune="lora", lora_rank=4, activation_checkpointing="auto")
    assert bb.activation_checkpointing == "full" and bb.checkpointed_blocks == list(range(len(bb.transformer_blocks())))
    assert bb.transformer.is_gradient_checkpointing


def test_a_bad_k_is_a_config_error_naming_the_key(no_model_building):
    """(An unknown mode fails at composition, listing the valid ones: tests/test_config.py.)"""
    with pytest.raises(ConfigError, match="model.activation_checkpointing_k: must be >= 1"):
        validate(
            compose(["model=tiny_flux", "model.activation_checkpointing=every_k", "model.activation_checkpointing_k=0"])
        )
