"""reward=imagereward (issue 28 item 4): ImageReward v1.0 on transformers' BLIP classes, loading the release's
ImageReward.pt key format (rewards/imagereward.py). The tiny twin holds exactly the authors' module's keys and shapes,
and a state dict in that format scores as the authors' own ImageReward.score does
(tests/reference/make_imagereward_values.py, run on THUDM/ImageReward at its pinned commit)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from conftest import compose
from launcher import components
from launcher.validate import validate
from rewardflow.errors import ConfigError
from rewards.tiny_imagereward import write_tokenizer
from rewards.tiny_twins import tiny_reward_overrides

REFERENCE = Path(__file__).with_name("reference") / "imagereward_values.json"
sys.path.insert(0, str(REFERENCE.parent))
from make_imagereward_values import PROMPTS, fill, reference_images  # noqa: E402

VALUES = json.loads(REFERENCE.read_text())


def build(*overrides: str):
    cfg = compose(["reward=imagereward", *overrides])
    validate(cfg)
    return components.build(cfg.reward, "reward").eval()


def test_the_twin_has_the_keys_and_shapes_of_the_authors_module(tiny_rewards):
    state = torch.load(tiny_rewards / "imagereward" / "ImageReward.pt", weights_only=True)
    theirs = {k: (v["shape"], v["dtype"]) for k, v in VALUES["keys"].items()}
    ours = {k: (list(t.shape), str(t.dtype).removeprefix("torch.")) for k, t in state.items()}
    assert ours == theirs
    med = json.loads((tiny_rewards / "imagereward" / "med_config.json").read_text())
    assert med == VALUES["med_config"]


@pytest.fixture(scope="module")
def authors_weights(tmp_path_factory) -> Path:
    """ImageReward.pt, med_config.json and the tokenizer of the reference: the authors' key names and the weights
    their code was run with."""
    folder = tmp_path_factory.mktemp("imagereward")
    state = {}
    for k, spec in VALUES["keys"].items():
        if spec["dtype"] == "float32":
            state[k] = fill(k, spec["shape"])
        else:  # med.py's persistent position_ids buffer
            state[k] = torch.arange(spec["shape"][-1]).expand(tuple(spec["shape"])).contiguous()
    torch.save(state, folder / "ImageReward.pt")
    (folder / "med_config.json").write_text(json.dumps(VALUES["med_config"]))
    write_tokenizer(folder / "tokenizer")
    return folder


def test_scores_match_the_authors_imagereward_score(authors_weights):
    reward = build(f"reward.path={authors_weights}", f"reward.tokenizer_path={authors_weights / 'tokenizer'}")
    images = [torch.from_numpy(im).permute(2, 0, 1)[None].float() / 255 for im in reference_images()]
    with torch.no_grad():
        ours = [float(reward(im, [p])[0]) for im, p in zip(images, PROMPTS)]
    ref = VALUES["scores"]
    # 224 x 224: no resampling, the same pixels, the model in fp32 (measured: equal)
    assert ours[:2] == pytest.approx(ref[:2], abs=1e-6)
    # 160 x 251: torch's antialiased bicubic against PIL's on uint8 (measured: 8e-4); a crop one pixel off is not
    assert ours[2] == pytest.approx(ref[2], abs=5e-3)
    assert max(ref) - min(ref) > 0.1  # the tolerances are far below what tells the images apart
    # the .pt file itself as reward.path (its med_config.json beside it) loads the same
    by_file = build(
        f"reward.path={authors_weights / 'ImageReward.pt'}", f"reward.tokenizer_path={authors_weights / 'tokenizer'}"
    )
    with torch.no_grad():
        assert float(by_file(images[0], PROMPTS[:1])[0]) == ours[0]


def test_batched_scores_and_the_gradient(tiny_rewards):
    reward = build(*tiny_reward_overrides(tiny_rewards, "imagereward")).requires_grad_(False)
    images = torch.rand(3, 3, 64, 96, generator=torch.Generator().manual_seed(0)).requires_grad_(True)
    prompts = ["a red car", "a blue sky", "a red car"]
    scores = reward(images, prompts)
    assert scores.shape == (3,) and scores.dtype == torch.float32
    with torch.no_grad():
        one_by_one = torch.cat([reward(images[i : i + 1], prompts[i : i + 1]) for i in range(3)])
    torch.testing.assert_close(scores.detach(), one_by_one, atol=1e-5, rtol=0)  # padding to 35 tokens: batch-free
    scores.sum().backward()
    assert torch.isfinite(images.grad).all() and images.grad.abs().sum() > 0


def test_missing_weights_fail_validation_offline_naming_key_file_and_fix(empty_hf_cache):
    with pytest.raises(ConfigError) as err:
        validate(compose(["reward=imagereward"]))
    msg = str(err.value)
    assert "reward.path" in msg and "ImageReward.pt" in msg and "https://huggingface.co/THUDM/ImageReward" in msg
    assert "reward.tokenizer_path" in msg and "google-bert/bert-base-uncased" in msg and "hf download" in msg


def test_a_checkpoint_without_imagereward_is_a_clear_error(tiny_rewards, tmp_path):
    state = torch.load(tiny_rewards / "imagereward" / "ImageReward.pt", weights_only=True)
    (tmp_path / "med_config.json").write_bytes((tiny_rewards / "imagereward" / "med_config.json").read_bytes())
    tok = f"reward.tokenizer_path={tiny_rewards / 'imagereward' / 'tokenizer'}"
    torch.save({k: v for k, v in state.items() if ".layer.1.crossattention." not in k}, tmp_path / "ImageReward.pt")
    with pytest.raises(ConfigError, match="reward.path: the checkpoint lacks 10 tensors of ImageReward"):
        build(f"reward.path={tmp_path}", tok)
    torch.save({"state_dict": {"fc.weight": torch.zeros(2, 2)}}, tmp_path / "ImageReward.pt")
    with pytest.raises(ConfigError, match="holds no ImageReward model"):
        build(f"reward.path={tmp_path}", tok)
