"""reward=aesthetic, the LAION improved aesthetic predictor (issue 28 item 4), on a tiny twin saved in the release's
format (a torch.save'd state dict with keys layers.{0,2,4,6,7}.*) and loaded through the real path; scores pinned
against flow_grpo's / DDPO's pipeline (CLIPProcessor through PIL, CLIPModel.get_image_features, normalise, MLP)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from conftest import compose
from launcher import components
from launcher.validate import validate
from rewardflow.errors import ConfigError
from rewards.tiny_twins import AESTHETIC_HEAD, tiny_reward_overrides
from test_reward_preprocess import smooth_image, to_pil

RELEASE_KEYS = [f"layers.{i}.{p}" for i in (0, 2, 4, 6, 7) for p in ("weight", "bias")]


def build(tiny_rewards, *extra):
    cfg = compose(["reward=aesthetic", *tiny_reward_overrides(tiny_rewards, "aesthetic"), *extra])
    validate(cfg)
    return components.build(cfg.reward, "reward").eval()


class ReleaseMLP(nn.Module):
    """The head as the improved-aesthetic-predictor code declares it (768 -> 1024 -> 128 -> 64 -> 16 -> 1 with
    dropouts, no activation), at the twin's input width."""

    def __init__(self, d: int):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(d, 1024),
            nn.Dropout(0.2),
            nn.Linear(1024, 128),
            nn.Dropout(0.2),
            nn.Linear(128, 64),
            nn.Dropout(0.1),
            nn.Linear(64, 16),
            nn.Linear(16, 1),
        )


def test_the_twin_is_in_the_release_format_and_scores_as_flow_grpo(tiny_rewards):
    from transformers import CLIPModel, CLIPProcessor

    state = torch.load(tiny_rewards / "aesthetic" / AESTHETIC_HEAD, weights_only=True)
    assert sorted(state) == sorted(RELEASE_KEYS)
    clip_dir = tiny_rewards / "clip"
    model, processor = CLIPModel.from_pretrained(clip_dir).eval(), CLIPProcessor.from_pretrained(clip_dir)
    mlp = ReleaseMLP(model.config.projection_dim).eval()
    mlp.load_state_dict(state)  # strict: the release's keys, nothing else
    images = torch.cat([smooth_image(96, 64, seed=i) for i in range(3)])  # uint8-valued, portrait
    with torch.no_grad():
        pixels = processor(images=[to_pil(images[i : i + 1]) for i in range(3)], return_tensors="pt")["pixel_values"]
        out = model.get_image_features(pixel_values=pixels)
        embed = out if isinstance(out, torch.Tensor) else out.pooler_output
        ref = mlp.layers(embed / torch.linalg.vector_norm(embed, dim=-1, keepdim=True)).squeeze(1)
        ours = build(tiny_rewards)(images, ["x"] * 3)
    assert ours.shape == (3,) and ours.dtype == torch.float32
    torch.testing.assert_close(ours, ref, atol=1e-4, rtol=0)  # PIL's uint8 rounding; measured <= 2e-5
    assert (ref.max() - ref.min()) > 4e-4  # ... far below the images' spread


def test_the_head_loads_from_the_file_and_from_a_bare_sequential(tiny_rewards, tmp_path):
    images = torch.rand(2, 3, 40, 40, generator=torch.Generator().manual_seed(0))
    head = tiny_rewards / "aesthetic" / AESTHETIC_HEAD
    bare = tmp_path / "bare.pth"  # nn.Sequential's own state dict: 0.weight, ...
    torch.save({k.removeprefix("layers."): v for k, v in torch.load(head, weights_only=True).items()}, bare)
    with torch.no_grad():
        ref = build(tiny_rewards)(images, ["a", "b"])
        for path in (head, bare):
            torch.testing.assert_close(build(tiny_rewards, f"reward.head_path={path}")(images, ["a", "b"]), ref)


def test_the_gradient_reaches_the_image(tiny_rewards):
    reward = build(tiny_rewards).requires_grad_(False)
    images = torch.rand(2, 3, 48, 80, generator=torch.Generator().manual_seed(1)).requires_grad_(True)
    reward(images, ["a", "b"]).sum().backward()
    assert torch.isfinite(images.grad).all() and images.grad.abs().sum() > 0
    assert reward.is_differentiable(reward.cfg)


def test_missing_head_fails_validation_offline_naming_key_file_and_fix(tiny_rewards, empty_hf_cache):
    with pytest.raises(ConfigError) as err:
        validate(compose(["reward=aesthetic", f"reward.path={tiny_rewards / 'clip'}"]))
    msg = str(err.value)
    assert "reward.head_path" in msg and AESTHETIC_HEAD in msg and "hf download" in msg
    assert "https://huggingface.co/camenduru/improved-aesthetic-predictor" in msg


@pytest.mark.parametrize("case", ["other keys", "other width"])
def test_a_wrong_head_is_a_clear_error(tiny_rewards, tmp_path, case):
    head = tmp_path / "head.pth"
    if case == "other keys":
        torch.save({"fc.weight": torch.zeros(1, 32)}, head)
        match = "reward.head_path: the file holds no aesthetic head: it lacks layers.0.weight"
    else:
        sizes = [768, 1024, 128, 64, 16, 1]
        torch.save(
            {
                f"layers.{i}.{p}": torch.zeros(b, a) if p == "weight" else torch.zeros(b)
                for i, (a, b) in zip((0, 2, 4, 6, 7), zip(sizes, sizes[1:]))
                for p in ("weight", "bias")
            },
            head,
        )
        match = "reads 768-dim embeddings, but reward.path=.* gives 32-dim"
    with pytest.raises(ConfigError, match=match):
        build(tiny_rewards, f"reward.head_path={head}")
