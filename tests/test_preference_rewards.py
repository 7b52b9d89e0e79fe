"""reward=hps|pickscore|clip on tiny random twins saved in the real formats and loaded through the real path (issue 7).

Scores are pinned against the peers' own pipelines (PIL preprocessing, the model's own forward) on the same image;
gradients are checked from the score to the image and through the tiny Flux VAE decode to the transformer; missing
weights fail at validation, offline, before any model is built.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from conftest import compose
from launcher import components
from launcher.train.trainer import RunInfo, Trainer
from launcher.validate import validate
from rewardflow.errors import ConfigError
from rewards.tiny_twins import OPEN_CLIP_ARCH, tiny_reward_overrides
from test_reward_preprocess import smooth_image, to_pil

PROMPTS = ["a red square", "a photo of a cat on a green tree"]
REWARDS = ["hps", "pickscore", "clip"]


def build(reward: str, tiny_rewards: Path, *extra: str):
    cfg = compose([f"reward={reward}", *tiny_reward_overrides(tiny_rewards, reward), *extra])
    validate(cfg)
    return components.build(cfg.reward, "reward").eval().requires_grad_(False)


@pytest.fixture(scope="module")
def rewards(tiny_rewards):
    return {r: build(r, tiny_rewards) for r in REWARDS}


def uint8_images(n: int = 2, h: int = 96, w: int = 64) -> torch.Tensor:
    return torch.cat([smooth_image(h, w, seed=i) for i in range(n)])


# ------------------------------------------------------------------------------ scores = the peers' pipelines
def test_hps_matches_the_hpsv2_pipeline(rewards, tiny_rewards):
    """hpsv2: create_model + load_state_dict(torch.load(ckpt)['state_dict']), PIL eval transform, cosine."""
    import open_clip

    from test_reward_preprocess import hps_reference

    folder = tiny_rewards / "hps"
    open_clip.add_model_config(folder / f"{OPEN_CLIP_ARCH}.json")
    model = open_clip.create_model(OPEN_CLIP_ARCH).eval()
    model.load_state_dict(torch.load(folder / "HPS_v2.1_compressed.pt", weights_only=True)["state_dict"])
    images = uint8_images()
    pixels = torch.cat([hps_reference(to_pil(images[i : i + 1])) for i in range(len(images))])
    with torch.no_grad():
        img = model.encode_image(pixels, normalize=True)
        txt = model.encode_text(open_clip.get_tokenizer(OPEN_CLIP_ARCH)(PROMPTS), normalize=True)
        ref = (img * txt).sum(-1)
        ours = rewards["hps"](images, PROMPTS)
    assert ours.dtype == torch.float32 and ours.shape == (2,)
    torch.testing.assert_close(ours, ref, atol=5e-4, rtol=0)  # measured: 1e-4 (uint8 rounding in PIL)
    assert (ref[0] - ref[1]).abs() > 4 * 5e-4  # ... which is far below the images' gap


@pytest.mark.parametrize("reward,divide_by", [("pickscore", 1.0), ("clip", 100.0)])
def test_hf_rewards_match_the_processor_pipeline(rewards, tiny_rewards, reward, divide_by):
    """PickScore/CLIPScore as the peers compute them: processor (PIL) -> CLIPModel -> logits_per_image diagonal."""
    from transformers import AutoTokenizer, CLIPImageProcessorPil, CLIPModel

    model_dir = tiny_rewards / reward / ("model" if reward == "pickscore" else "")
    proc_dir = tiny_rewards / reward / ("processor" if reward == "pickscore" else "")
    model = CLIPModel.from_pretrained(model_dir).eval()
    images = uint8_images(h=64, w=100)
    pixels = CLIPImageProcessorPil.from_pretrained(proc_dir)(
        images=[to_pil(images[i : i + 1]) for i in range(2)], return_tensors="pt"
    )["pixel_values"]
    tokens = AutoTokenizer.from_pretrained(proc_dir)(
        PROMPTS, padding=True, truncation=True, max_length=77, return_tensors="pt"
    )
    with torch.no_grad():
        ref = model(pixel_values=pixels, **tokens).logits_per_image.diagonal() / divide_by
        ours = rewards[reward](images, PROMPTS)
    tol = 5e-4 * model.logit_scale.exp().item() / divide_by  # 5e-4 in cosine; measured <= 1.5e-4
    torch.testing.assert_close(ours, ref, atol=tol, rtol=0)
    assert (ref[0] - ref[1]).abs() > 4 * tol
    assert rewards[reward].divide_by == divide_by


def test_pickscore_divide_by_26_convention(rewards, tiny_rewards):
    images = uint8_images()
    scaled = build("pickscore", tiny_rewards, "reward.divide_by=26")
    with torch.no_grad():
        torch.testing.assert_close(scaled(images, PROMPTS) * 26, rewards["pickscore"](images, PROMPTS))


def test_hps_loads_folder_pt_and_safetensors_identically(rewards, tiny_rewards):
    images = uint8_images()
    by_file = build("hps", tiny_rewards, f"reward.path={tiny_rewards / 'hps' / 'HPS_v2.1.safetensors'}")
    with torch.no_grad():
        torch.testing.assert_close(by_file(images, PROMPTS), rewards["hps"](images, PROMPTS))


# ------------------------------------------------------------------------------------------- gradients
@pytest.mark.parametrize("reward", REWARDS)
def test_gradient_reaches_the_image(rewards, reward):
    images = torch.rand(2, 3, 48, 80, generator=torch.Generator().manual_seed(0)).requires_grad_(True)
    rewards[reward](images, PROMPTS).sum().backward()
    g = images.grad
    assert torch.isfinite(g).all() and g.abs().sum() > 0
    assert not any(p.requires_grad for p in rewards[reward].parameters())  # the reward stays frozen


def test_gradient_reaches_the_transformer_through_the_vae(tiny_rewards):
    """One Euler step of the tiny Flux transformer, VAE decode, reward=multi (all three rewards), backward."""
    cfg = compose(["reward=multi", *tiny_reward_overrides(tiny_rewards, "multi")])
    backbone = components.build(cfg.model, "model")
    reward = components.build(cfg.reward, "reward").eval().requires_grad_(False)
    prompts = ["a red square", "a blue sky"]
    noise = backbone.initial_noise(2, torch.Generator().manual_seed(0))
    sigma = torch.ones(2)
    x0 = noise - sigma[:, None, None] * backbone.velocity(noise, sigma, backbone.encode_prompts(prompts))
    reward(backbone.decode(x0), prompts).sum().backward()
    grads = [p.grad for p in backbone.trainable_parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    assert norm > 0, "no gradient reached the transformer"


# ------------------------------------------------------------------------------------ dtype, cache, video
def test_bf16_runs_the_model_in_bf16_and_returns_fp32(rewards, tiny_rewards):
    images = uint8_images().requires_grad_(True)
    for reward in ("hps", "clip"):
        half = build(reward, tiny_rewards, "reward.dtype=bf16")
        score = half(images, PROMPTS)
        assert score.dtype == torch.float32
        assert all(p.dtype == torch.bfloat16 for p in half.model.parameters())
        cosine_tol = 0.02  # bf16 keeps ~3 significant digits through two 2-layer towers
        torch.testing.assert_close(
            score, rewards[reward](images, PROMPTS), atol=cosine_tol * half.cosine_scale(), rtol=0
        )
        score.sum().backward()
        assert torch.isfinite(images.grad).all() and images.grad.abs().sum() > 0


def test_each_prompt_is_encoded_once(tiny_rewards):
    reward = build("clip", tiny_rewards)
    seen = []
    encode = reward.encode_texts
    reward.encode_texts = lambda prompts: (seen.extend(prompts), encode(prompts))[1]
    images = torch.rand(4, 3, 32, 32)
    with torch.no_grad():
        reward(images, ["a", "b", "a", "b"])
        cached = reward(images, ["b", "a", "b", "c"])
        assert seen == ["a", "b", "c"]
        reward._text_cache.clear()
        torch.testing.assert_close(cached, reward(images, ["b", "a", "b", "c"]))


def test_videos_are_scored_per_frame_and_reduced(tiny_rewards):
    reward = build("hps", tiny_rewards, "reward.frame_reduce=topk_mean", "reward.frame_topk_frac=0.5")
    video = torch.rand(2, 4, 3, 32, 48, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        per_video = reward(video, PROMPTS)
        frames = reward.score(video.flatten(0, 1), [p for p in PROMPTS for _ in range(4)]).view(2, 4)
    torch.testing.assert_close(per_video, frames.topk(2, dim=1).values.mean(1))


# ------------------------------------------------------------------------------ weights: where and when missing
@pytest.mark.parametrize(
    "reward,key,missing,repo",
    [
        ("hps", "reward.path", "HPS_v2.1_compressed.pt", "xswu/HPSv2"),
        ("pickscore", "reward.path", "config.json", "yuvalkirstain/PickScore_v1"),
        ("clip", "reward.path", "config.json", "openai/clip-vit-large-patch14"),
        ("multi", "reward.components.hps.path", "HPS_v2.1_compressed.pt", "xswu/HPSv2"),
    ],
)
def test_missing_weights_fail_before_any_model_is_built(
    reward, key, missing, repo, empty_hf_cache, no_model_building, tmp_path
):
    with pytest.raises(ConfigError) as err:
        Trainer(compose([f"reward={reward}"]), RunInfo(run_dir=tmp_path))
    msg = str(err.value)
    assert key in msg and missing in msg and f"https://huggingface.co/{repo}" in msg and "hf download" in msg


def test_pickscore_processor_is_checked_too(empty_hf_cache, tiny_rewards):
    cfg = compose(["reward=pickscore", f"reward.path={tiny_rewards / 'pickscore' / 'model'}"])
    with pytest.raises(ConfigError, match="reward.processor_path=.*laion/CLIP-ViT-H-14.*preprocessor_config.json"):
        validate(cfg)


@pytest.mark.parametrize(
    "override,match",
    [
        ("reward.path=/nonexistent/HPS_v2.1_compressed.pt", "no such file or folder"),
        ("reward.arch=/nonexistent/arch.json", "reward.arch"),
        ("reward.arch=ViT-Q-99", "not an open_clip architecture"),
    ],
)
def test_bad_local_paths_fail_validation(override, match, tiny_rewards):
    with pytest.raises(ConfigError, match=match):
        validate(compose(["reward=hps", *tiny_reward_overrides(tiny_rewards, "hps"), override]))


def _broken_reward_files(tiny_rewards: Path, tmp_path: Path, case: str) -> list[str]:
    """Overrides pointing a reward at a copy of its tiny twin with one file broken as users break them: a JSON typo,
    a config of another kind, a cut download, a text file under a weights name."""
    hps = tiny_reward_overrides(tiny_rewards, "hps")
    arch = tmp_path / "arch.json"
    if case == "arch-typo":
        arch.write_text('{"embed_dim": 32,, "vision_cfg": {}}')
        return ["reward=hps", *hps, f"reward.arch={arch}"]
    if case == "arch-not-open-clip":
        arch.write_text('{"hidden_size": 32}')
        return ["reward=hps", *hps, f"reward.arch={arch}"]
    if case == "hps-text-as-pt":
        weights = tmp_path / "HPS_v2.1_compressed.pt"
        weights.write_text("<html>404 Not Found</html>")
        return ["reward=hps", *hps, f"reward.path={weights}"]
    if case == "hps-cut-safetensors":
        weights = tmp_path / "HPS_v2.1.safetensors"
        weights.write_bytes(b"\xff" * 8 + b"{not json")
        return ["reward=hps", *hps, f"reward.path={weights}"]
    folder = tmp_path / "clip"
    shutil.copytree(tiny_rewards / "clip", folder)
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 3])  # a download cut short
    return ["reward=clip", f"reward.path={folder}"]


@pytest.mark.parametrize(
    "case,match",
    [
        ("arch-typo", r"reward.arch.*not valid JSON \(line 1, column 18"),
        ("arch-not-open-clip", r"reward.arch.*lacks embed_dim, vision_cfg, text_cfg"),
        ("hps-text-as-pt", r"reward.path.*neither a torch.save archive \(zip\) nor a pickle"),
        ("hps-cut-safetensors", r"reward.path.*not a safetensors file"),
        ("clip-cut-safetensors", r"reward.path.*model.safetensors' is not a safetensors file"),
    ],
)
def test_broken_reward_files_fail_validation_naming_the_key(case, match, tiny_rewards, tmp_path, no_model_building):
    with pytest.raises(ConfigError, match=match):
        validate(compose(_broken_reward_files(tiny_rewards, tmp_path, case)))


def test_the_format_check_passes_every_real_weights_format(tiny_rewards, tmp_path):
    """The twins' real files (a torch.save zip, safetensors, a legacy pickle) pass; only their header is read."""
    from rewards.weights import format_problem

    legacy = tmp_path / "legacy.pt"
    torch.save({"state_dict": {"w": torch.ones(2)}}, legacy, _use_new_zipfile_serialization=False)
    files = [tiny_rewards / "hps" / "HPS_v2.1_compressed.pt", tiny_rewards / "clip" / "model.safetensors", legacy]
    assert [format_problem(f) for f in files] == [None, None, None]


@pytest.mark.parametrize(
    "source,local",
    [
        ("xswu/HPSv2", False),
        ("stabilityai/stable-diffusion-3.5-large", False),
        ("ckpt/HPS_v2.1_compressed.pt", True),
        ("HPSv2", True),
        ("./a/b", True),
    ],
)
def test_hub_ids_and_paths_are_told_apart(source, local):
    from rewards.weights import is_local

    assert is_local(source) is local


def test_hf_rewards_need_a_folder(tiny_rewards):
    with pytest.raises(ConfigError, match="is a file; it must be a folder holding config.json"):
        validate(compose(["reward=clip", f"reward.path={tiny_rewards / 'clip' / 'config.json'}"]))


def test_a_folder_without_the_checkpoint_names_it(tiny_rewards, tmp_path):
    with pytest.raises(ConfigError, match="has no HPS_v2.1_compressed.pt"):
        validate(compose(["reward=hps", *tiny_reward_overrides(tiny_rewards, "hps"), f"reward.path={tmp_path}"]))


def _cache_repo(cache: Path, repo: str, files: list[Path]) -> None:
    """Lay ``files`` out as a Hugging Face hub cache entry of ``repo`` (refs/main -> snapshots/<commit>/)."""
    commit = "0" * 40
    entry = cache / f"models--{repo.replace('/', '--')}"
    (entry / "refs").mkdir(parents=True, exist_ok=True)
    (entry / "refs" / "main").write_text(commit)
    snapshot = entry / "snapshots" / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    for f in files:
        shutil.copy(f, snapshot / f.name)


def test_hub_ids_resolve_from_the_offline_cache(empty_hf_cache, tiny_rewards):
    """The default configs (hub ids, no reward.path) validate and load from the cache, offline."""
    t = tiny_rewards
    _cache_repo(empty_hf_cache, "xswu/HPSv2", [t / "hps" / "HPS_v2.1_compressed.pt"])
    _cache_repo(empty_hf_cache, "yuvalkirstain/PickScore_v1", list((t / "pickscore" / "model").iterdir()))
    _cache_repo(
        empty_hf_cache, "laion/CLIP-ViT-H-14-laion2B-s32B-b79K", list((t / "pickscore" / "processor").iterdir())
    )
    _cache_repo(empty_hf_cache, "openai/clip-vit-large-patch14", list((t / "clip").iterdir()))
    cfg = compose(["reward=multi", f"reward.components.hps.arch={t / 'hps' / (OPEN_CLIP_ARCH + '.json')}"])
    assert cfg.reward.components.pickscore.path == "yuvalkirstain/PickScore_v1"
    validate(cfg)
    reward = components.build(cfg.reward, "reward")
    with torch.no_grad():
        assert torch.isfinite(reward(torch.rand(2, 3, 32, 32), PROMPTS)).all()
