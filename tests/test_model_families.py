"""The four model families on their tiny twins, through the production loading path (issue 6).

Per family: the twin folder is written with ``save_pretrained`` and loaded by the real adapter; the adapter's
velocity reproduces the family's own diffusers pipeline step by step (prompt encoding, packing, timestep scale,
guidance, sigma grid); decoding gives images (frames for Wan2.1); the packing round-trips; LoRA trains only the
adapter and its disabled-adapter velocity is the base model's; ``save_pretrained`` exports what diffusers loads.
"""

from __future__ import annotations

import json

import pytest
import torch

from conftest import compose
from families import FAMILIES, NAMES

PROMPTS = ["a red square", "a photo of a blue circle"]


@pytest.fixture(scope="module")
def lora_backbones(twin_cache):
    """One LoRA backbone per family (built lazily, shared by the tests of this module)."""
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = FAMILIES[name].build(finetune="lora", lora_rank=4, keep_reference=True)
        return cache[name]

    return get


def _sigma(values, n=None) -> torch.Tensor:
    s = torch.as_tensor(values, dtype=torch.float32)
    return s.expand(n).clone() if n is not None and s.dim() == 0 else s


# ------------------------------------------------------------------------------------------------ loading path
@pytest.mark.parametrize("name", [n for n in NAMES if n != "tiny_flux"])  # tiny_flux: test_flux_backbone.py
def test_twin_is_saved_and_loaded_through_from_pretrained(name, twin_cache):
    fam = FAMILIES[name]
    path = fam.path()
    assert twin_cache in __import__("pathlib").Path(path).parents
    index = json.loads((__import__("pathlib").Path(path) / "model_index.json").read_text())
    assert {"transformer", "vae", "scheduler", "text_encoder", "tokenizer"} <= set(index)
    assert fam.path() == path  # cached, not rebuilt
    module = __import__(fam.cls().__module__, fromlist=["x"])
    build = next(getattr(module, f) for f in dir(module) if f.startswith("build_tiny_"))
    fresh = build(0).transformer.state_dict()
    bb = fam.build(finetune="full", activation_checkpointing="full")
    loaded = bb.transformer.state_dict()
    assert fresh.keys() == loaded.keys() and all(torch.equal(fresh[k], loaded[k]) for k in fresh)
    assert bb.transformer.is_gradient_checkpointing and bb.dtype == torch.float32  # CPU: fp32
    assert all(p.requires_grad for p in bb.transformer.parameters())
    assert not any(p.requires_grad for m in [bb.vae, *bb._text_encoders] for p in m.parameters())


@pytest.mark.parametrize("name", NAMES)
def test_gradient_checkpointing_gives_the_same_gradients(name, lora_backbones):
    bb = lora_backbones(name)
    x, s = bb.initial_noise(2, torch.Generator().manual_seed(4)), torch.tensor([0.8, 0.3])
    emb = bb.encode_prompts(PROMPTS)
    params = list(bb.trainable_parameters())

    def grads():
        for p in params:
            p.grad = None
        bb.velocity(x, s, emb).square().mean().backward()
        # None: Qwen-Image's last block discards its text stream, so LoRA there gets no gradient
        return [None if p.grad is None else p.grad.clone() for p in params]

    plain = grads()
    bb.transformer.enable_gradient_checkpointing()
    try:
        ckpt = grads()
    finally:
        bb.transformer.disable_gradient_checkpointing()
        for p in params:
            p.grad = None
    assert sum(g is not None for g in plain) > len(plain) // 2
    for a, b in zip(plain, ckpt):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("name", NAMES)
def test_bf16_compute_path(name, twin_cache):
    """dtype=bf16 (the GPU default): frozen encoders, VAE and LoRA base in bf16 (the modules the class keeps in fp32
    excepted), fp32 adapters, autocast forward, fp32 velocity. Exercised on the CPU, where it is only slower."""
    bb = FAMILIES[name].build(finetune="lora", lora_rank=2, dtype="bf16")
    assert bb.dtype == torch.bfloat16 and bb._text_encoders[0].dtype == torch.bfloat16
    assert all(p.dtype == torch.float32 for p in bb.trainable_parameters())
    keep = set(getattr(bb.transformer, "_keep_in_fp32_modules", None) or ())
    for n, p in bb.transformer.named_parameters():
        if not p.requires_grad:
            assert p.dtype == (torch.float32 if keep.intersection(n.split(".")) else torch.bfloat16), n
    v = bb.velocity(bb.initial_noise(1), torch.tensor([0.6]), bb.encode_prompts(PROMPTS[:1]))
    assert v.dtype == torch.float32 and torch.isfinite(v).all()
    v.square().mean().backward()
    assert all(
        p.grad is not None and torch.isfinite(p.grad).all() for p in bb.trainable_parameters() if p.grad is not None
    )


# ------------------------------------------------------------------------------------ pipeline parity (conventions)
def _run_pipeline(bb, fam, steps, latents):
    """Run the family's diffusers pipeline (bb.pipe, same modules) recording each step's guided model output, the
    sample it was evaluated at, and every timestep the transformer received."""
    rec = {"out": [], "sample": [], "t_model": []}
    sched = bb.pipe.scheduler
    original = sched.step

    def step(model_output, timestep, sample, *args, **kwargs):
        rec["out"].append(model_output.detach().float().clone())
        rec["sample"].append(sample.detach().float().clone())
        return original(model_output, timestep, sample, *args, **kwargs)

    sched.step = step
    hook = bb.transformer.register_forward_pre_hook(
        lambda m, a, k: rec["t_model"].append(k["timestep"].detach().clone()), with_kwargs=True
    )
    try:
        with torch.no_grad():
            bb.pipe(
                PROMPTS[:1] * latents.shape[0],
                num_inference_steps=steps,
                latents=latents.clone(),
                output_type="latent",
                **bb.pipeline_kwargs(),
            )
    finally:
        del sched.step
        hook.remove()
    rec["sigmas"] = sched.sigmas.double().clone()
    return rec


@pytest.mark.parametrize("name", NAMES)
def test_velocity_reproduces_the_diffusers_pipeline(name, lora_backbones):
    """Prompt encoding, packing, timestep scale, guidance (embedded or one batch-2B CFG forward, with Qwen-Image's
    renorm) and the sigma grid all agree with the family's own pipeline, step by step."""
    fam, bb = FAMILIES[name], lora_backbones(name)
    steps, b = 3, 2
    x = bb.initial_noise(b, torch.Generator().manual_seed(0))
    rec = _run_pipeline(bb, fam, steps, x)
    sched_shift = float(bb.scheduler.config.get("flow_shift", bb.scheduler.config.get("shift", 3.0)))
    ours = bb.sigmas(steps, sched_shift)
    if name == "tiny_wan2.1":  # UniPC lowers sigma_0 = 1 by 1e-6 for its multistep log; we step Euler from 1
        assert abs(float(rec["sigmas"][0]) - 1) < 1e-5 and ours[0] == 1.0
        torch.testing.assert_close(ours[1:], rec["sigmas"][1:], rtol=0, atol=1e-7)
    else:
        torch.testing.assert_close(ours, rec["sigmas"], rtol=0, atol=1e-7)

    seen = []
    hook = bb.transformer.register_forward_pre_hook(
        lambda m, a, k: seen.append(k["timestep"].detach().clone()), with_kwargs=True
    )
    emb = bb.encode_prompts(PROMPTS[:1] * b)
    try:
        with torch.no_grad():
            for i in range(steps):
                v = bb.velocity(rec["sample"][i], _sigma(float(ours[i]), b), emb)
                torch.testing.assert_close(v, rec["out"][i], rtol=1e-4, atol=1e-5, msg=f"{name} step {i}")
    finally:
        hook.remove()
    # the transformer saw the same timesteps; the adapter runs one forward per step (CFG batched as [uncond, cond]),
    # where some pipelines (Qwen-Image, Wan) run the two halves as two forwards
    pipe_t = torch.cat(rec["t_model"]).double().flatten().unique()
    our_t = torch.cat(seen).double().flatten().unique()
    torch.testing.assert_close(our_t, pipe_t, rtol=1e-6, atol=1e-6)
    assert len(rec["t_model"]) in (steps, 2 * steps) and len(seen) == steps


@pytest.mark.parametrize("name", NAMES)
def test_timestep_scale_and_guidance_reach_the_transformer(name, lora_backbones):
    bb = lora_backbones(name)
    seen = {}
    hook = bb.transformer.register_forward_pre_hook(lambda m, a, k: seen.update(k), with_kwargs=True)
    emb = bb.encode_prompts(PROMPTS)
    with torch.no_grad():
        bb.velocity(bb.initial_noise(2), torch.tensor([0.7, 0.25]), emb)
    hook.remove()
    # the family's declared convention (pinned against its pipeline by test_velocity_reproduces_the_diffusers_pipeline)
    expected = bb.model_timestep(torch.tensor([0.7, 0.25], dtype=torch.float64)).double()
    if bb.do_cfg:  # one forward over [uncond, cond]
        expected = torch.cat([expected, expected])
        assert seen["hidden_states"].shape[0] == 4
    torch.testing.assert_close(seen["timestep"].double(), expected, rtol=1e-6, atol=1e-6)
    if name == "tiny_flux":
        assert torch.equal(seen["guidance"], torch.full((2,), 3.5))  # FLUX.1-dev: embedded guidance, no CFG
    if name == "tiny_wan2.1":
        with torch.no_grad():  # sigma = 1 -> 999 (UniPC's first timestep)
            bb.velocity(bb.initial_noise(1), torch.tensor([1.0]), bb.encode_prompts(PROMPTS[:1]))
        assert float(bb.model_timestep(torch.tensor([1.0]))[0]) == 999


@pytest.mark.parametrize("name", [n for n in NAMES if FAMILIES[n].true_cfg])
def test_cfg_combines_unconditional_and_conditional_predictions(name, lora_backbones):
    """velocity = v_u + w (v_c - v_u) from ONE batched forward; w <= 1 turns CFG off (single forward)."""
    bb = lora_backbones(name)
    x = bb.initial_noise(2, torch.Generator().manual_seed(3))
    s = torch.tensor([0.9, 0.4])
    calls = []
    hook = bb.transformer.register_forward_pre_hook(
        lambda m, a, k: calls.append(k["hidden_states"].shape[0]), with_kwargs=True
    )
    w = bb.guidance_scale
    try:
        with torch.no_grad():
            v = bb.velocity(x, s, bb.encode_prompts(PROMPTS))
            bb.guidance_scale = 1.0  # CFG off: plain conditional predictions
            v_c = bb.velocity(x, s, bb.encode_prompts(PROMPTS))
            v_u = bb.velocity(x, s, bb.encode_prompts([bb.negative_prompt] * 2))
    finally:
        bb.guidance_scale = w
        hook.remove()
    assert calls == [4, 2, 2]
    expected = v_u + w * (v_c - v_u)
    if name == "tiny_qwenimage":  # QwenImagePipeline's per-token renorm
        expected = expected * v_c.norm(dim=-1, keepdim=True) / expected.norm(dim=-1, keepdim=True)
    torch.testing.assert_close(v, expected, rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------------------------------- latents and decoding
@pytest.mark.parametrize("name", NAMES)
def test_decode_shape_and_packing_round_trip(name, lora_backbones):
    fam, bb = FAMILIES[name], lora_backbones(name)
    x = bb.initial_noise(3, torch.Generator().manual_seed(1))
    assert x.shape == (3, *bb.latent_shape) and x.dtype == torch.float32
    with torch.no_grad():
        out = bb.decode(x)
        images = fam.images(2, bb)
        latents = bb.encode_images(images)
        direct = bb.decode(latents)
    if bb.video:
        assert out.shape == (3, bb.num_frames, 3, bb.height, bb.width)  # frames (B, F, 3, H, W)
    else:
        assert out.shape == (3, 3, bb.height, bb.width)
    assert 0 <= float(out.min()) and float(out.max()) <= 1
    assert latents.shape == (2, *bb.latent_shape)  # the VAE's latent in the transformer layout
    if name in ("tiny_flux", "tiny_qwenimage"):  # 2x2 packing: unpack(pack(z)) == z exactly
        lat = bb.pipe._unpack_latents(x, bb.height, bb.width, bb.pipe.vae_scale_factor)
        if lat.dim() == 5:
            lat = lat[:, :, 0]
        n, c, h, w = lat.shape
        torch.testing.assert_close(bb.pipe._pack_latents(lat, n, c, h, w), x, rtol=0, atol=0)
    # decode(encode(img)) equals the VAE's own reconstruction (normalisation and packing invert each other)
    with torch.no_grad():
        if bb.video:
            raw = bb.vae.decode(bb.vae.encode(images.permute(0, 2, 1, 3, 4) * 2 - 1).latent_dist.mean).sample
            raw = (raw / 2 + 0.5).clamp(0, 1).permute(0, 2, 1, 3, 4)
        elif name == "tiny_qwenimage":
            raw = bb.vae.decode(bb.vae.encode(images[:, :, None] * 2 - 1).latent_dist.mean).sample[:, :, 0]
            raw = (raw / 2 + 0.5).clamp(0, 1)
        else:
            raw = (bb.vae.decode(bb.vae.encode(images * 2 - 1).latent_dist.mean).sample / 2 + 0.5).clamp(0, 1)
    torch.testing.assert_close(direct, raw, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", NAMES)
def test_prompt_cache_and_released_text_encoders(name, twin_cache):
    bb = FAMILIES[name].build(finetune="lora", lora_rank=2, prompt_cache_size=2)
    calls = []
    enc = bb._text_encoders[-1]
    hook = enc.register_forward_hook(lambda *a: calls.append(1))
    a = bb.encode_prompts(["a green tree", "a green tree", "a pink car"])
    b = bb.encode_prompts(["a pink car"])
    assert len(calls) == 1 + int(bb.do_cfg)  # the batch once (+ the negative prompt once)
    for k in b.tensors:
        torch.testing.assert_close(b.tensors[k][0], a.tensors[k][2])
    bb.encode_prompts(["a cat", "a dog"])  # LRU of 2: "a green tree" is dropped
    hook.remove()
    bb.release_text_encoders()
    bb.encode_prompts(["a cat"])  # cached: still fine
    with pytest.raises(RuntimeError, match="released"):
        bb.encode_prompts(["a green tree"])


def test_prompt_cache_is_bounded_in_bytes():
    """The LRU drops entries beyond ``max_bytes`` (model.prompt_cache_gib), least recently used first, whatever its
    count bound; an entry larger than the bound is returned but not kept."""
    from models.text_encoding import PromptCache

    calls = []

    def encode(prompts):
        calls.extend(prompts)
        return [{"t5": torch.zeros(256 if p != "huge" else 1024)} for p in prompts]  # 1 KiB (4 KiB for "huge")

    cache = PromptCache(None, torch.device("cpu"), max_bytes=3 * 1024)
    cache.get(["a", "b", "c"], encode)
    assert len(cache) == 3 and cache.nbytes == 3 * 1024
    cache.get(["a"], encode)  # "a" is now the most recent
    cache.get(["d"], encode)  # 4 KiB > 3 KiB: "b", the least recently used, goes
    assert "b" not in cache and {"a", "c", "d"} == {p for p in ["a", "b", "c", "d"] if p in cache}
    assert cache.nbytes <= 3 * 1024
    (entry,) = cache.get(["huge"], encode)
    assert entry["t5"].numel() == 1024 and len(cache) == 0 and cache.nbytes == 0
    assert calls == ["a", "b", "c", "d", "huge"]


# --------------------------------------------------------------------------------------------- fine-tuning modes
@pytest.mark.slow
@pytest.mark.parametrize("method", ["flow_grpo", "eam"])
@pytest.mark.parametrize("name", NAMES)
def test_lora_step_trains_only_the_adapter_and_reference_is_the_base_model(name, method, tmp_path):
    """A Flow-GRPO step with KL, or an EAM step (both use the frozen reference), in LoRA mode: only adapter weights
    move, the base stays bit-identical, and the disabled-adapter velocity equals a freshly loaded base model's."""
    from launcher.train.trainer import RunInfo, Trainer

    extra = ["method.kl_beta=0.1"] if method == "flow_grpo" else ["method.endpoint_nfe=3", "method.loss_timesteps=2"]
    cfg = compose(
        [
            "experiment=smoke",
            "logger=none",
            f"model={name}",
            "model.finetune=lora",
            "model.lora_rank=4",
            f"method={method}",
            *extra,
            "trainer.steps=1",
        ]
    )
    trainer = Trainer(cfg, RunInfo(run_dir=tmp_path))
    bb = trainer.backbone
    named = dict(bb.transformer.named_parameters())
    before = {k: v.detach().clone() for k, v in named.items()}
    assert {id(p) for p in trainer.params} == {id(p) for k, p in named.items() if "lora_" in k}  # optimizer sees
    row = trainer.train_step(0)  # adapter only
    assert row["health/skipped_updates"] == 0 and ("policy/kl_ref" in row or method == "eam")
    assert row["loss"] == row["loss"] and row["count/transformer_bwd"] > 0
    changed = {k for k, v in named.items() if not torch.equal(v, before[k])}
    assert changed and all("lora_" in k for k in changed)
    assert all(torch.equal(v, before[k]) for k, v in named.items() if "lora_" not in k)

    base = FAMILIES[name].build(finetune="full")
    x = bb.initial_noise(2, torch.Generator().manual_seed(5))
    s, emb = torch.tensor([0.8, 0.3]), bb.encode_prompts(PROMPTS)
    with torch.no_grad():
        with bb.reference():
            v_ref = bb.velocity(x, s, emb)
        v_base = base.velocity(x, s, base.encode_prompts(PROMPTS))
        v_policy = bb.velocity(x, s, emb)
    torch.testing.assert_close(v_ref, v_base, rtol=1e-5, atol=1e-5)
    assert (v_policy - v_ref).abs().max() > 0  # the trained adapter changes the policy


# -------------------------------------------------------------------------------------------------- export
@pytest.mark.parametrize("name", NAMES)
def test_save_pretrained_exports_what_diffusers_loads(name, lora_backbones, tmp_path):
    import diffusers

    fam, bb = FAMILIES[name], lora_backbones(name)
    with torch.no_grad():  # make the adapter non-trivial
        for k, p in bb.transformer.named_parameters():
            if "lora_B" in k:
                p.normal_(0, 0.05, generator=torch.Generator().manual_seed(len(k)))
    x = bb.initial_noise(2, torch.Generator().manual_seed(2))
    s, emb = torch.tensor([0.6, 0.2]), bb.encode_prompts(PROMPTS)
    with torch.no_grad():
        v = bb.velocity(x, s, emb)
    bb.save_pretrained(tmp_path / "lora")
    assert (tmp_path / "lora" / "pytorch_lora_weights.safetensors").exists()
    info = json.loads((tmp_path / "lora" / "rewardflow_export.json").read_text())
    assert info["finetune"] == "lora" and info["base_model"].startswith("rewardflow tiny twin: model=")
    assert not any(str(v).startswith("/") or "/tmp" in str(v) for v in info.values())  # no path of this machine

    fresh = fam.build(finetune="full")
    fresh.pipe.load_lora_weights(str(tmp_path / "lora"))  # diffusers' own LoRA loader
    with torch.no_grad():
        torch.testing.assert_close(fresh.velocity(x, s, fresh.encode_prompts(PROMPTS)), v, rtol=1e-4, atol=1e-5)

    full = fam.build(finetune="full")
    with torch.no_grad():
        for p in full.transformer.parameters():
            p.mul_(1.01)
    full.save_pretrained(tmp_path / "full")
    cls = getattr(diffusers, type(full.transformer).__name__)
    loaded = cls.from_pretrained(str(tmp_path / "full"), subfolder="transformer")
    ref = full.transformer.state_dict()
    assert all(torch.equal(loaded.state_dict()[k], ref[k]) for k in ref)
