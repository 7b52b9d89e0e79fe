"""Hacking in plain sight by default (issue 28 item 5; docs/evaluation.md#hacking-in-plain-sight): every run that
evaluates scores the trained reward, a second reward and the per-prompt diversity. The CPU models: brightness and
diversity on downsampled pixels (reward.embedding=pixels), without a download, and a demo run logs the three in
metrics.jsonl and W&B; the full-size models: the LAION aesthetic predictor and CLIP's diversity."""

from __future__ import annotations

import json
import re

import pytest
import torch

from conftest import compose
from launcher import components
from launcher.train.evaluation import extra_rewards
from launcher.validate import validate
from rewardflow.errors import ConfigError

CPU_MODELS = ["tiny_flux", "tiny_flux_pretrained", "tiny_sd35m", "tiny_qwenimage", "tiny_wan2.1", "toy_gaussian"]
FULL_SIZE = ["flux", "qwenimage", "sd35m", "wan2.1"]


@pytest.mark.parametrize("model", CPU_MODELS)
def test_the_cpu_models_score_brightness_and_pixel_diversity_by_default(model):
    cfg = compose([f"model={model}"])
    assert cfg.data.name == "demo" and set(cfg.eval.rewards) == {"brightness", "diversity"}
    assert cfg.eval.rewards.diversity.embedding == "pixels" and cfg.eval.samples_per_prompt >= 2


@pytest.mark.parametrize("data", ["demo", "file", "hpdv2", "ocr", "pickscore", "geneval"])
def test_every_prompt_source_scores_a_second_reward_and_diversity(data):
    """On a CPU model: brightness and pixel diversity; on a full-size one: the LAION aesthetic predictor and CLIP's
    diversity (conf/eval_rewards/standard.yaml); two samples a prompt or more, so that diversity can be scored."""
    cpu = compose([f"data={data}"])
    assert set(cpu.eval.rewards) == {"brightness", "diversity"} and cpu.eval.rewards.diversity.embedding == "pixels"
    for model in FULL_SIZE:
        cfg = compose([f"data={data}", f"model={model}"])
        assert set(cfg.eval.rewards) == {"aesthetic", "diversity"}, (data, model)
        assert cfg.eval.rewards.aesthetic.name == "aesthetic" and cfg.eval.rewards.diversity.embedding == "clip"
        assert cfg.eval.rewards.diversity.path == cfg.eval.rewards.aesthetic.path == "openai/clip-vit-large-patch14"
        assert cfg.eval.samples_per_prompt >= 2


def test_presets_that_draw_one_sample_a_prompt_score_no_diversity():
    """The presets whose reference evaluation draws one sample a prompt (Flash-GRPO's, DiffusionNFT's and AWM's, the
    HPSv2 benchmark's for jagg_paper) keep it and score the aesthetic set; every other preset on a full-size model gets
    the standard set."""
    from conftest import group_options

    for preset in group_options("experiment"):
        cfg = compose([f"experiment={preset}"])
        if cfg.eval.samples_per_prompt == 1:
            assert set(cfg.eval.rewards) == {"aesthetic"}, preset
        elif cfg.model.name in FULL_SIZE:
            assert set(cfg.eval.rewards) == {"aesthetic", "diversity"}, preset
        else:
            assert set(cfg.eval.rewards) == {"brightness", "diversity"}, preset


def test_the_benchmarks_own_protocol_from_the_command_line(empty_hf_cache):
    """One sample a prompt and no diversity (the named set's reference evaluation), or the download-free set or none
    on a full-size model."""
    one = compose(["model=flux", "data=hpdv2", "eval.samples_per_prompt=1", "~reward@eval.rewards.diversity"])
    assert set(one.eval.rewards) == {"aesthetic"} and one.eval.samples_per_prompt == 1
    assert set(compose(["model=flux", "eval_rewards@eval.rewards=offline"]).eval.rewards) == {"brightness", "diversity"}
    assert not compose(["model=flux", "~eval_rewards@eval.rewards"]).eval.rewards


def test_a_full_size_run_checks_and_builds_its_held_out_rewards(tiny_rewards, empty_hf_cache):
    """model=flux on its tiny twin's folder: the default held-out rewards check and build from the reward twins (the
    real formats); offline without their weights the check names each reward's key and the fix, before anything
    is built."""
    from families import real_family_overrides

    base = ["model=flux", "data=file", "eval.split=2"]
    prompts = empty_hf_cache.parent / "prompts.txt"
    prompts.write_text("".join(f"a {c} square\n" for c in ("red", "green", "blue", "white", "black")))
    base.append(f"data.path={prompts}")
    cfg = compose([*base, *real_family_overrides(base)])
    validate(cfg)
    for name in ("aesthetic", "diversity"):
        components.build(cfg.eval.rewards[name], f"eval.rewards.{name}")
    missing = compose([*base, *(o for o in real_family_overrides(base) if not o.startswith("eval.rewards."))])
    with pytest.raises(ConfigError) as e:
        validate(missing)
    for key in ("eval.rewards.aesthetic.path", "eval.rewards.aesthetic.head_path", "eval.rewards.diversity.path"):
        assert f"- {key}=" in str(e.value) and f"set {key}=/path/to/" in str(e.value), str(e.value)


def test_the_demo_drops_or_replaces_a_default_reward_from_the_command_line():
    assert set(compose(["~reward@eval.rewards.diversity"]).eval.rewards) == {"brightness"}  # nothing left behind
    clip = compose(["reward@eval.rewards.diversity=diversity"]).eval.rewards.diversity
    assert clip.embedding == "clip" and clip.path == "openai/clip-vit-large-patch14"


def test_the_default_demo_evaluation_needs_no_download(empty_hf_cache):
    """HF_HUB_OFFLINE=1 with an empty Hugging Face cache: the demo's evaluation with its default rewards checks."""
    cfg = compose([])
    assert cfg.eval.every > 0
    validate(cfg)
    for name in ("brightness", "diversity"):
        components.build(cfg.eval.rewards[name], f"eval.rewards.{name}")  # nothing fetched


def test_a_default_reward_named_as_the_trained_one_is_that_reward_scored_once():
    same = compose(["reward=brightness"])
    validate(same)
    assert set(extra_rewards(same)) == {"diversity"}  # eval/brightness/* is the trained reward's row
    other = compose(["reward=brightness", "reward.channel_weights=[0.2,0.7,0.1]"])
    with pytest.raises(ConfigError, match=re.escape("eval.rewards.brightness: the name is the trained reward's")):
        validate(other)
    validate(compose(["reward=brightness", "reward.channel_weights=[0.2,0.7,0.1]", "~reward@eval.rewards.brightness"]))


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["eval.samples_per_prompt=1"], "score no diversity: ~reward@eval.rewards.<its name>"),
        (["eval.rewards.diversity.pixel_size=0"], "eval.rewards.diversity.pixel_size: must be >= 1 (got 0)"),
    ],
)
def test_bad_default_diversity_settings_are_config_errors(overrides, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        validate(compose(overrides))


# --------------------------------------------------------------------------------------- the pixel embedding
def test_the_pixel_embedding_is_area_averaged_pixels_in_minus_one_to_one():
    cfg = compose([])
    diversity = components.build(cfg.eval.rewards.diversity, "eval.rewards.diversity")
    images = torch.rand(3, 3, 64, 48, generator=torch.Generator().manual_seed(0))
    feats = diversity.evaluate(images, ["p", "p", "q"])
    assert feats.shape == (3, 3 * 16 * 16) and torch.allclose(feats.norm(dim=-1), torch.ones(3))
    blocks = images.unfold(2, 4, 4).unfold(3, 3, 3).mean((-1, -2))  # 16 x 16 blocks of 4 x 3 pixels of 64 x 48
    expected = blocks.flatten(1) * 2 - 1
    assert torch.allclose(feats, expected / expected.norm(dim=-1, keepdim=True), atol=1e-6)
    grey = torch.full((2, 3, 32, 32), 0.5)
    assert torch.equal(diversity.evaluate(grey, ["g", "g"]), torch.zeros(2, 768))
    same = torch.cat([images[:1], images[:1], images[1:3]])
    same_d, other_d = diversity.prompt_scores(diversity.evaluate(same, ["a", "a", "b", "b"]).double(), list("aabb"))
    assert abs(float(same_d)) < 1e-12 and float(other_d) > 0.01


# ------------------------------------------------------------------------------------------------ the acceptance
def test_a_demo_run_logs_the_trained_reward_a_second_one_and_diversity_in_metrics_and_wandb(tmp_path, empty_hf_cache):
    """Issue 28's acceptance: the demo with eval.rewards = two rewards + diversity (its defaults: color trained,
    brightness and diversity evaluated) shows all three in metrics.jsonl and in the W&B run (offline files)."""
    from launcher.tracking.wandb_offline import find_offline_runs, read_offline_run
    from launcher.train.trainer import RunInfo, Trainer

    cfg = compose(
        [
            "experiment=smoke",
            "logger=wandb",
            "logger.mode=offline",
            "trainer.export=false",
            "trainer.steps=1",
            "eval.every=1",
            "eval.prompts=[a red car,a blue circle,a white cat]",
        ]
    )
    Trainer(cfg, RunInfo(run_dir=tmp_path)).fit()
    keys = {f"eval/{r}/{s}" for r in ("color", "brightness", "diversity") for s in ("mean", "std")}
    evals = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in evals if "eval/color/mean" in r]
    assert [r["step"] for r in evals] == [0, 1] and all(keys <= set(r) for r in evals)
    assert all(0 < r["eval/diversity/mean"] < 2 and 0 < r["eval/brightness/mean"] < 1 for r in evals)
    (offline,) = find_offline_runs(tmp_path)
    history = [r for r in read_offline_run(offline).history if "eval/color/mean" in r]
    assert [r["step"] for r in history] == [0, 1]
    for logged, row in zip(history, evals):
        assert {k: logged[k] for k in keys} == {k: row[k] for k in keys}
