"""Files a run leaves for people: sample image grids and the reward curve (matplotlib, headless)."""

from __future__ import annotations

from pathlib import Path

import torch

from launcher.tracking.media import display_scale, written_whole


def sample_order(n: int, group_size: int) -> list[int]:
    """Indices of a step's ``n`` samples for its image grid: one per prompt first (the groups' first members), then
    the rest, so that a grid cut short still shows every prompt."""
    return list(range(0, n, group_size)) + [i for i in range(n) if i % group_size]


def save_image_grid(images: torch.Tensor, path: str | Path, nrow: int = 4) -> Path:
    """Save (B, 3, H, W) images in [0, 1] as one PNG grid (upscaled so tiny images stay visible); videos
    (B, F, 3, H, W) show their middle frame."""
    from torchvision.utils import make_grid, save_image

    if images.dim() == 5:
        images = images[:, images.shape[1] // 2]
    images = images.detach().float().cpu().clamp(0, 1)
    scale = display_scale(images.shape[-1])
    if scale > 1:
        images = torch.nn.functional.interpolate(images, scale_factor=scale, mode="nearest")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with written_whole(path) as tmp:
        save_image(make_grid(images, nrow=nrow, padding=2, pad_value=1.0), tmp, format="png")
    return path


def plot_reward_curve(history: list[dict], path: str | Path, title: str = "", eval_key: str | None = None) -> Path:
    """``reward/mean`` (± std band) against step and against wall-clock seconds, side by side; with ``eval_key``
    (e.g. ``eval/color/mean``) the held-out evaluations too, as markers at their compute."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in history if r.get("reward/mean") is not None]  # skipped (NaN) steps are logged as null
    steps = [r["step"] for r in rows]
    mean = [r["reward/mean"] for r in rows]
    std = [r.get("reward/std") or 0.0 for r in rows]
    wall = [r.get("time/wallclock_s", float("nan")) for r in rows]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    for ax, x, label in ((axes[0], steps, "step"), (axes[1], wall, "wall-clock (s)")):
        ax.plot(x, mean, color="C0", lw=1.8)
        ax.fill_between(
            x, [m - s for m, s in zip(mean, std)], [m + s for m, s in zip(mean, std)], color="C0", alpha=0.2, lw=0
        )
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
    evals = [r for r in history if eval_key and r.get(eval_key) is not None]
    if evals:
        for ax, x in ((axes[0], [r["step"] for r in evals]), (axes[1], [r["time/eval_wallclock_s"] for r in evals])):
            ax.plot(x, [r[eval_key] for r in evals], "o-", color="C1", lw=1.2, ms=4, label=f"{eval_key} (held out)")
        axes[0].legend(loc="lower right", fontsize=8)
    axes[0].set_ylabel("reward (mean ± std over samples)")
    fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    try:
        with written_whole(path) as tmp:
            fig.savefig(tmp, dpi=110, format="png")
    finally:
        plt.close(fig)
    return path
