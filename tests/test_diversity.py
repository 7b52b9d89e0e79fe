"""reward=diversity (issue 28 item 4): the per-prompt mean pairwise distance of image embeddings, an evaluation metric
(eval.rewards) logged as eval/<name>/mean|std over prompts. The math in float64, the grouping of the evaluation's
samples by prompt, and its refusal as a training reward."""

from __future__ import annotations

import json
import math

import pytest
import torch

from conftest import compose
from launcher import components
from launcher.train.trainer import RunInfo, Trainer
from launcher.validate import validate
from rewardflow.errors import ConfigError
from rewards.diversity import mean_pairwise_distance
from rewards.tiny_twins import tiny_reward_overrides

DIV = ["+reward@eval.rewards.div=diversity"]


def div_overrides(tiny_rewards) -> list[str]:
    return [*DIV, *tiny_reward_overrides(tiny_rewards, "diversity", "eval.rewards.div")]


# ------------------------------------------------------------------------------------------------------- the math
@pytest.mark.parametrize("distance", ["cosine", "euclidean"])
def test_identical_samples_have_zero_diversity(float64, distance):
    x = torch.randn(1, 7, dtype=torch.float64).repeat(4, 1) * torch.tensor([[1.0], [2.0], [0.5], [3.0]])  # scale-free
    d = mean_pairwise_distance(x, distance)
    assert d.dtype == torch.float64 and abs(float(d)) < 1e-15


def test_known_embeddings_give_known_values(float64):
    orthonormal = torch.eye(3, dtype=torch.float64)
    assert float(mean_pairwise_distance(orthonormal, "cosine")) == pytest.approx(1.0, abs=1e-15)
    assert float(mean_pairwise_distance(orthonormal, "euclidean")) == pytest.approx(math.sqrt(2), abs=1e-15)
    # east, north, west: pairwise cosines 0, -1, 0 -> distances 1, 2, 1; euclidean sqrt2, 2, sqrt2
    x = torch.tensor([[2.0, 0.0], [0.0, 3.0], [-1.0, 0.0]], dtype=torch.float64)
    assert float(mean_pairwise_distance(x, "cosine")) == pytest.approx(4 / 3, abs=1e-15)
    assert float(mean_pairwise_distance(x, "euclidean")) == pytest.approx((2 + 2 * math.sqrt(2)) / 3, abs=1e-15)
    with pytest.raises(ValueError, match="at least 2 samples"):
        mean_pairwise_distance(x[:1])


# ---------------------------------------------------------------------------------------------- the reward's parts
@pytest.fixture(scope="module")
def diversity(tiny_rewards):
    cfg = compose(["eval.every=1", *div_overrides(tiny_rewards)])
    validate(cfg)
    return components.build(cfg.eval.rewards.div, "eval.rewards.div")


def test_prompt_scores_group_interleaved_samples_by_prompt(diversity, float64):
    """The evaluation's samples come sample-major (a, b, a, b): each prompt's own samples are compared."""
    feats = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 0.0]], dtype=torch.float64)
    scores = diversity.prompt_scores(feats, ["a", "b", "a", "b"])
    assert scores.dtype == torch.float64
    assert scores.tolist() == [1.0, 0.0]  # a: orthogonal pair; b: the same direction twice


def test_the_same_image_twice_scores_zero_and_videos_use_their_frames(diversity):
    image = torch.rand(1, 3, 40, 56, generator=torch.Generator().manual_seed(0))
    other = torch.rand(1, 3, 40, 56, generator=torch.Generator().manual_seed(1))
    feats = diversity.evaluate(torch.cat([image, image, image, other]), ["p", "p", "q", "q"])
    assert feats.shape == (4, 32) and torch.allclose(feats.norm(dim=-1), torch.ones(4))
    same, different = diversity.prompt_scores(feats, ["p", "p", "q", "q"]).tolist()
    assert abs(same) < 1e-6 and different > 1e-4
    video = torch.stack([torch.cat([image, other]), torch.cat([image, other])])  # (2, F=2, 3, H, W), equal videos
    assert abs(float(diversity.prompt_scores(diversity.evaluate(video, ["v", "v"]), ["v", "v"])[0])) < 1e-6


# ------------------------------------------------------------------------------------------- in the evaluation
def test_an_evaluation_logs_diversity_per_prompt_beside_the_other_rewards(tiny_rewards, tmp_path):
    """The demo with eval.rewards = aesthetic + diversity: the evaluation row in metrics.jsonl has all three (with the
    trained colour reward), and eval/div/mean|std are over the held-out prompts of their samples' diversity."""
    prompts = ["a red car", "a blue circle", "a white cat"]
    cfg = compose(
        [
            "experiment=smoke",
            "logger=none",
            "trainer.export=false",
            "eval.every=1",
            f"eval.prompts=[{','.join(prompts)}]",
            "eval.samples_per_prompt=3",
            "eval.sampling_steps=4",
            *div_overrides(tiny_rewards),
            "+reward@eval.rewards.aes=aesthetic",
            *tiny_reward_overrides(tiny_rewards, "aesthetic", "eval.rewards.aes"),
        ]
    )
    trainer = Trainer(cfg, RunInfo(run_dir=tmp_path))
    reward, seen = trainer.evaluator.rewards["div"], []
    evaluate = reward.evaluate
    reward.evaluate = lambda images, prompts: (seen.append((images, prompts)), evaluate(images, prompts))[1]
    trainer.evaluator.run(0, 0.0)
    (row,) = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert {"eval/color/mean", "eval/aes/mean", "eval/div/mean", "eval/div/std"} <= set(row)
    images = torch.cat([i for i, _ in seen])
    sampled = [p for _, ps in seen for p in ps]
    assert sampled == prompts * 3  # sample-major: one sample of every prompt, then the next
    per_prompt = reward.prompt_scores(reward.evaluate(images, sampled).double(), sampled)
    assert per_prompt.shape == (3,) and (per_prompt > 0).all()
    assert row["eval/div/mean"] == pytest.approx(float(per_prompt.mean()), rel=1e-6)
    assert row["eval/div/std"] == pytest.approx(float(per_prompt.std()), rel=1e-5)


# ----------------------------------------------------------------------------------------------------- refusals
@pytest.mark.parametrize(
    "overrides,match",
    [
        (["reward=diversity"], "reward: diversity scores a prompt's samples together.*cannot be trained on"),
        (["eval.every=1", "eval.samples_per_prompt=1", *DIV], "eval.rewards.div: diversity compares.*samples_per"),
    ],
)
def test_diversity_is_an_evaluation_metric_of_several_samples(tiny_rewards, overrides, match):
    key = "reward" if overrides[0] == "reward=diversity" else "eval.rewards.div"
    with pytest.raises(ConfigError, match=match):
        validate(compose([*overrides, *tiny_reward_overrides(tiny_rewards, "diversity", key)]))
