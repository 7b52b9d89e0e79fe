"""The tiny FLUX twin with a pre-trained transformer (``model=tiny_flux_pretrained``): the starting point of the claim
studies and of the comparison protocol (docs/comparing.md#comparison-protocol), so that a method fine-tunes a model
that already draws images rather than learning from random weights.

The twin (models/tiny_flux.py) ships a random transformer, whose velocity is not the flow-matching velocity of any
law. Here it learns, by flow matching (Lipman et al. 2023, the linear path ``x_s = (1 - s) x_0 + s noise`` with
velocity ``noise - x_0``), the twin VAE's latents of the synthetic colour images (models/tiny_pretrain.py) paired with
random prompts of the CPU demo, so the pre-trained model draws colours at random and a colour reward tilts it towards
the prompt's colour. Deterministic in the seed; written once into the cache like the twins (models/twins.py),
keyed by the twin's recipe and this one, and loaded back through the real FLUX adapter.
"""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from models.flux import FluxBackbone
from models.tiny_flux import TRANSFORMER, VAE, materialize_tiny_flux  # noqa: F401  (TRANSFORMER/VAE: the planner)
from models.tiny_flux_config import TinyFluxModelConfig
from models.tiny_pretrain import synthetic_colour_images
from models.twins import TinyTwin, materialize_folder, recipe_key

log = logging.getLogger(__name__)

#: the CPU demo's prompts in conf/data/demo.yaml's order (the claim studies drew from that list: the same list and
#: order keep the same weights; tests/test_tiny_flux_pretrained.py holds the two equal)
PROMPTS = (
    "a red square",
    "a green tree",
    "a blue sky",
    "a yellow flower",
    "a cyan circle",
    "a magenta car",
    "a white house",
    "a black cat",
)
BATCH = 32  # images per pre-training step
LR = 1e-3  # Adam's rate
VERSION = 1  # bump when the recipe above changes, so cached folders are rebuilt


def flow_matching_pretrain(backbone: Any, steps: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Train ``backbone``'s transformer in place for ``steps`` Adam steps of flow matching on the twin VAE's latents
    of synthetic colour images, each paired with a random prompt of :data:`PROMPTS`; return its state dict (copied).
    One generator seeded with ``seed`` draws images, prompts, times and noise, in that order every step."""
    from diffusers import FluxPipeline

    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(backbone.trainable_parameters(), lr=LR)
    size, vae = int(backbone.height), backbone.vae
    t0 = time.time()
    for step in range(steps):
        with torch.no_grad():
            z = vae.encode(synthetic_colour_images(BATCH, size, g)).latent_dist.mean
            z = (z - vae.config.shift_factor) * vae.config.scaling_factor
            x0 = FluxPipeline._pack_latents(z, BATCH, z.shape[1], z.shape[2], z.shape[3])
        picks = torch.randint(len(PROMPTS), (BATCH,), generator=g).tolist()
        embeds = backbone.encode_prompts([PROMPTS[i] for i in picks])
        sigma = torch.rand(BATCH, generator=g)
        noise = torch.randn(x0.shape, generator=g)
        s = sigma[:, None, None]
        loss = ((backbone.velocity((1 - s) * x0 + s * noise, sigma, embeds) - (noise - x0)) ** 2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % max(1, steps // 5) == 0 or step == steps - 1:
            log.info(
                "flow-matching pre-training of the tiny FLUX twin: step %d of %d, loss %.4f, %.0f s",
                step,
                steps,
                float(loss.detach()),
                time.time() - t0,
            )
    return {k: v.detach().clone() for k, v in backbone.transformer.state_dict().items()}


def materialize_tiny_flux_pretrained(cache_dir: str | Path | None = None, seed: int = 0, steps: int = 600) -> Path:
    """The twin's folder with its transformer pre-trained for ``steps`` (:func:`flow_matching_pretrain`), written
    once into the cache next to the twin and returned; ``model=tiny_flux_pretrained`` loads it."""
    from diffusers import FluxTransformer2DModel

    twin = materialize_tiny_flux(cache_dir, seed)
    key = recipe_key(VERSION, twin.name, steps, BATCH, LR, PROMPTS)

    def write(folder: Path) -> None:
        log.warning(
            "building the pre-trained tiny FLUX twin once (%d flow-matching steps; minutes on a few CPU cores)", steps
        )
        backbone = FluxBackbone(TinyFluxModelConfig(path=str(twin), seed=seed))  # the twin as model=tiny_flux loads it
        state = flow_matching_pretrain(backbone, steps, seed)
        shutil.copytree(twin, folder, dirs_exist_ok=True)
        transformer = FluxTransformer2DModel.from_pretrained(twin / "transformer")
        transformer.load_state_dict(state)
        shutil.rmtree(folder / "transformer")
        transformer.save_pretrained(folder / "transformer")

    return materialize_folder("tiny_flux_pretrained", key, write, cache_dir)


class TinyFluxPretrainedBackbone(TinyTwin, FluxBackbone):
    """``FluxBackbone`` over the pre-trained twin's folder (built on first use)."""

    name = "tiny_flux_pretrained"
    materialize = staticmethod(materialize_tiny_flux_pretrained)

    @classmethod
    def twin_folder(cls, cfg: Any) -> Path:
        return materialize_tiny_flux_pretrained(cfg.cache_dir, cfg.seed, cfg.pretrain_steps)

    @classmethod
    def recipe_overrides(cls, cfg: Any) -> str:
        return f"model.seed={cfg.seed} model.pretrain_steps={cfg.pretrain_steps}"
