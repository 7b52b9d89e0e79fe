"""The reward path's two costs besides the transformer: the VAE decode of a group's latents (every reward reads
decoded images) and a ViT-H reward tower (HPSv2.1 and PickScore are open_clip / CLIP ViT-H-14 image towers).

``vae``: FLUX.1's ``AutoencoderKL`` at its published size (black-forest-labs/flux ``src/flux/util.py`` ae_params:
ch 128, ch_mult (1, 2, 4, 4), 2 res blocks, 16 latent channels, scale 0.3611, shift 0.1159, in diffusers' names as
diffusers ``scripts/convert_flux_to_diffusers.py`` maps them; SD3.5 shares the architecture), random bf16 weights,
decoding 512 x 512 images at the profile's batches, no gradient (as the rollouts decode).

``reward_tower``: open_clip's ``ViT-H-14`` image tower (its bundled model config; 632 M parameters), random
weights cast to bf16 as the preference rewards run on a GPU, at 224 x 224: a forward without gradient (scoring
rollouts) and a forward + backward to the pixels with frozen weights (a differentiable reward's gradient, as EAM
and Adjoint Matching take it).
"""

from __future__ import annotations

import time

import torch

from gpu_measure.profile import Check
from gpu_measure.record import Recorder
from gpu_measure.timing import first_line, free_memory, measure_pass, reset_peak, timed

FLUX1_VAE = dict(
    in_channels=3,
    out_channels=3,
    down_block_types=["DownEncoderBlock2D"] * 4,
    up_block_types=["UpDecoderBlock2D"] * 4,
    block_out_channels=(128, 256, 512, 512),
    layers_per_block=2,
    latent_channels=16,
    norm_num_groups=32,
    act_fn="silu",
    use_quant_conv=False,
    use_post_quant_conv=False,
    scaling_factor=0.3611,
    shift_factor=0.1159,
    sample_size=1024,
)
TOWER_ARCH = "ViT-H-14"
TOWER_PIXELS = 224


def section_vae(chk: Check, rec: Recorder, allowance: float) -> None:
    from diffusers import AutoencoderKL

    from models.tiny_flux import VAE as TINY_VAE

    end = time.monotonic() + allowance
    device, side = chk.device, chk.profile.vae_latent_side
    cfg = dict(TINY_VAE if chk.profile.tiny else FLUX1_VAE)
    free_memory(device)
    build_s, vae = timed(device, lambda: _build(AutoencoderKL, cfg, device, chk.compute_dtype))
    vae.requires_grad_(False).eval()
    n_params = sum(p.numel() for p in vae.decoder.parameters())
    batches = chk.profile.vae_batches
    for i, batch in enumerate(batches):
        z = torch.randn(batch, cfg["latent_channels"], side, side, generator=torch.Generator().manual_seed(batch))
        z = z.to(device=device, dtype=chk.compute_dtype)

        def decode():
            with torch.no_grad():
                return vae.decode(z, return_dict=False)[0]

        label = f"decode b{batch} {side * 2 ** (len(cfg['block_out_channels']) - 1)}px"
        try:
            m = measure_pass(device, decode, chk.reps, (end - time.monotonic()) / (len(batches) - i))
        except torch.cuda.OutOfMemoryError as e:
            m = {"error": first_line(e)}
        free_memory(device, collect="error" in m)
        if "error" in m:
            rec.write("vae", label, status="oom", batch=batch, **m)
            continue
        out = m.pop("out")
        rec.write(
            "vae",
            label,
            batch=batch,
            **m,
            out_shape=list(out.shape),
            out_finite=bool(torch.isfinite(out).all()),
            decoder_params_m=n_params / 1e6,
            build_s=build_s,
            images_per_s=batch / m["seconds"],
            tflops=m["executed_tflop"] / m["seconds"],
            value=f"{batch / m['seconds']:.3g} images/s",
        )
        del out
    del vae


def _build(cls, cfg: dict, device: torch.device, dtype: torch.dtype) -> torch.nn.Module:
    with torch.device(device):
        return cls(**cfg).to(dtype)


def section_reward_tower(chk: Check, rec: Recorder, allowance: float) -> None:
    import open_clip

    from rewards.tiny_twins import OPEN_CLIP_CFG

    end = time.monotonic() + allowance
    device, batch = chk.device, chk.profile.tower_batch
    cfg = OPEN_CLIP_CFG if chk.profile.tiny else open_clip.get_model_config(TOWER_ARCH)
    free_memory(device)
    reset_peak(device)
    build_s, clip = timed(device, lambda: _build(open_clip.CLIP, cfg, device, chk.compute_dtype))
    tower = clip.visual.requires_grad_(False).eval()
    del clip  # the text tower: prompts are encoded once and cached
    free_memory(device)
    n_params = sum(p.numel() for p in tower.parameters())
    size = cfg["vision_cfg"].get("image_size", TOWER_PIXELS)
    pixels = torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(0))
    pixels = pixels.to(device=device, dtype=chk.compute_dtype)

    def score():
        with torch.no_grad():
            return tower(pixels)

    def score_and_grad():
        x = pixels.detach().requires_grad_(True)
        tower(x).float().square().sum().backward()
        return x.grad

    arch = "tiny twin" if chk.profile.tiny else TOWER_ARCH
    for i, (kind, fn) in enumerate((("fwd", score), ("fwd+bwd to pixels", score_and_grad))):
        label = f"{arch} b{batch} {kind}"
        try:
            m = measure_pass(device, fn, chk.reps, (end - time.monotonic()) / (2 - i))
        except torch.cuda.OutOfMemoryError as e:
            m = {"error": first_line(e)}
        free_memory(device, collect="error" in m)
        if "error" in m:
            rec.write("reward_tower", label, status="oom", batch=batch, **m)
            continue
        out = m.pop("out")
        rec.write(
            "reward_tower",
            label,
            batch=batch,
            image_size=size,
            params_m=n_params / 1e6,
            build_s=build_s,
            **m,
            out_finite=bool(torch.isfinite(out).all()),
            images_per_s=batch / m["seconds"],
            tflops=m["executed_tflop"] / m["seconds"],
            value=f"{batch / m['seconds']:.3g} images/s",
        )
        del out
    del tower, pixels
