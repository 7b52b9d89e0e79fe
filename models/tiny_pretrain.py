"""Short pre-training of a tiny twin's VAE on synthetic colour images.

A random VAE decodes any latent to nearly the same muddy colour, so no reward could move its images; real families
ship trained VAEs. A few hundred Adam steps on solid backgrounds with rectangles (the colours the demo names, plus
random ones) give the tiny VAE a decoder that can show saturated colours, and set ``scaling_factor`` /
``shift_factor`` from the measured latent statistics as the real families did. Deterministic in the seed.
"""

from __future__ import annotations

import torch

from rewardflow.colours import COLOURS


def synthetic_colour_images(n: int, size: int, generator: torch.Generator) -> torch.Tensor:
    """(n, 3, size, size) in [-1, 1]: a background colour and one rectangle of another colour."""
    table = torch.tensor(list(COLOURS.values()))
    named = table[torch.randint(len(table), (n,), generator=generator)]
    cols = torch.where(torch.rand(n, 1, generator=generator) < 0.5, named, torch.rand(n, 3, generator=generator))
    img = cols[:, :, None, None].expand(n, 3, size, size).clone()
    fg = torch.rand(n, 3, generator=generator)
    for k in range(n):
        y0, x0 = torch.randint(0, size * 3 // 4, (2,), generator=generator).tolist()
        h, w = torch.randint(size // 8, size // 2, (2,), generator=generator).tolist()
        img[k, :, y0 : y0 + h, x0 : x0 + w] = fg[k][:, None, None]
    return img * 2 - 1


def pretrain_vae(vae, steps: int = 300, batch: int = 24, lr: float = 3e-3, seed: int = 0) -> dict[str, float]:
    """Train ``vae`` (an ``AutoencoderKL``) in place as an autoencoder; set its latent scaling from the data."""
    size = int(vae.config.sample_size)
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(vae.parameters(), lr=lr)
    vae.train()
    for _ in range(steps):
        x = synthetic_colour_images(batch, size, g)
        post = vae.encode(x).latent_dist
        loss = ((vae.decode(post.mean).sample - x) ** 2).mean() + 1e-4 * post.kl().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    vae.eval()
    with torch.no_grad():
        z = vae.encode(synthetic_colour_images(256, size, g)).latent_dist.mean
    shift, scale = float(z.mean()), float(1.0 / z.std())
    vae.register_to_config(shift_factor=shift, scaling_factor=scale)
    return {"reconstruction_mse": float(loss.detach()), "shift_factor": shift, "scaling_factor": scale}
