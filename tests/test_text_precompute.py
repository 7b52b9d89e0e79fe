"""``model.text_encoders=precompute`` (models/text_cache.py, docs/memory.md#text-conditioning): the prompt set encoded
once at start, each of 2 gloo ranks its share, into a cache folder; the conditioning, and the samples, log-probs,
rewards and gradients of a training step, equal today's on-the-fly encoding; the encoders are freed; a second run
reuses the folder without any encoder call."""

from __future__ import annotations

import pytest
import torch

from conftest import compose, grad_error
from dist_utils import run_distributed

PROMPTS = ["a red square", "a photo of a blue circle", "a green tree", "a pink car", "a cyan sky"]


def prompt_set(tag: str) -> list[str]:
    """The test's prompts, made unique to this test run so that its first run finds no cache folder."""
    return [f"{p} {tag}" for p in PROMPTS]


def _step(text_encoders: str, run_dir, prompts: list[str]) -> dict:
    from launcher.train.trainer import RunInfo, Trainer

    cfg = compose(
        [
            "logger=none",
            "trainer.sample_every=0",
            "trainer.threads=1",
            "model=tiny_qwenimage",
            "method=flow_grpo",
            "method.group_size=2",
            "method.prompts_per_step=2",
            "method.update_batch=2",
            "method.clip_range=0.5",  # a ratio of 1 +- rounding must not flip a PPO clip
            f"model.text_encoders={text_encoders}",
            "data.prompts=[" + ",".join(prompts) + "]",
        ]
    )
    trainer = Trainer(cfg, RunInfo(run_dir=run_dir))
    bb, method, rank = trainer.backbone, trainer.method, trainer.world.rank
    embeds = bb.encode_prompts(prompts)
    gen = torch.Generator().manual_seed(3 + rank)
    rollout = method.rollout(trainer.data.batch(0, 2)[rank :: trainer.world.world_size], gen)
    method.score(rollout, trainer.reward)
    method.prepare_update(rollout)
    for mb in method.update_plan(rollout, gen)[0]:
        method.backward(rollout, mb, 2)
    grads = {n: p.grad.full_tensor().clone() for n, p in bb.transformer.named_parameters() if p.grad is not None}
    folder = bb._precomputed.folder if bb._precomputed is not None else None
    return {
        "embeds": embeds.tensors,
        "samples": rollout.decode_latents,
        "log_probs": rollout.log_probs,
        "rewards": rollout.rewards,
        "grads": grads,
        "released": bb._text_encoders is None,
        "folder": folder,
    }


def _ranks(rank, world, tmp):
    from pathlib import Path

    tmp = Path(tmp)
    prompts = prompt_set(tmp.name)
    today = _step("offload", tmp / f"offload-{rank}", prompts)
    first = _step("precompute", tmp / f"first-{rank}", prompts)
    from models.qwenimage import QwenImageBackbone

    def no_encoder(self, prompts):
        raise AssertionError("a text encoder ran although the prompt set was precomputed")

    original, QwenImageBackbone._encode = QwenImageBackbone._encode, no_encoder
    try:
        second = _step("precompute", tmp / f"second-{rank}", prompts)
    finally:
        QwenImageBackbone._encode = original
    return today, first, second


def close(a, b, what):
    scale = float(b.abs().max()) or 1.0
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5 * scale, msg=lambda m: f"{what}: {m}")


@pytest.mark.slow
def test_precomputed_text_equals_on_the_fly_encoding_on_two_ranks_and_is_reused(tmp_path):
    results = run_distributed(_ranks, 2, str(tmp_path), timeout=1200)
    folder = results[0][1]["folder"]
    assert len(list(folder.glob("part-*.safetensors"))) == 2  # one share per rank
    for today, first, second in results:
        assert first["folder"] == second["folder"] == folder
        assert first["released"] and second["released"] and not today["released"]
        for run in (first, second):
            for k, v in today["embeds"].items():
                close(run["embeds"][k], v, f"embeds {k}")
            for key in ("samples", "log_probs", "rewards"):
                close(run[key].nan_to_num(), today[key].nan_to_num(), key)
            # the encoders saw other batches (each rank's share), so the conditioning differs by rounding (checked
            # above at 1e-5); two sampling steps and a backward amplify that to ~1e-5 of the gradient
            assert grad_error(run["grads"], today["grads"]) <= 1e-4


def test_a_prompt_outside_the_precomputed_set_is_refused(tmp_path):
    from families import FAMILIES

    settings = dict(height=32, width=32, max_sequence_length=16, text_encoders="precompute")
    bb = FAMILIES["tiny_flux"].build(**settings)
    assert bb.precompute_text(PROMPTS[:2], cache_dir=tmp_path) is False and bb._text_encoders is None
    bb.encode_prompts(PROMPTS[:2])
    with pytest.raises(RuntimeError, match="model.text_encoders=offload"):
        bb.encode_prompts(["a prompt never seen"])
    again = FAMILIES["tiny_flux"].build(**settings)
    assert again.precompute_text(list(reversed(PROMPTS[:2])), cache_dir=tmp_path) is True  # any order: reused
    assert bb._precomputed.folder == again._precomputed.folder and bb._precomputed.folder.parent == tmp_path


def test_precompute_streams_parts_to_disk_and_reads_them_back(tmp_path, monkeypatch):
    """A rank writes its share in parts of about ``PART_BYTES`` (never the whole share in RAM): with a bound of one
    entry, every encoder batch of 8 prompts lands in its own part, and every prompt reads back as encoded."""
    import models.text_cache as text_cache
    from rewardflow.distributed import current_world

    prompts = [f"prompt {i}" for i in range(20)]

    def encode(batch):
        return [{"embeds": torch.full((3, 4), float(int(p.split()[1])))} for p in batch]

    monkeypatch.setattr(text_cache, "PART_BYTES", 1)
    store, reused = text_cache.build_or_load(tmp_path, "k", prompts, encode, current_world())
    assert not reused
    parts = sorted(p.name for p in store.folder.glob("part-*.safetensors"))
    assert len(parts) == 3, parts  # 20 prompts, 8 per encoder batch
    for p, entry in zip(prompts, store.lookup(prompts)):
        assert torch.equal(entry["embeds"], torch.full((3, 4), float(int(p.split()[1]))))
