"""Chunked sampling, decoding and scoring: a rollout's memory is set by the chunk sizes, not by the batch
(docs/memory.md#chunked-rollouts).

* ``method.rollout_chunk``: rows per transformer call while sampling, CFG rows counted (a sample with true CFG is 2
  rows and is never split). The SDE step and its log-prob run per chunk too (:func:`chunked_sde_step`), so the
  step's temporaries are a chunk's; its noise is drawn for the whole batch at once, so the random draws do not
  depend on the chunk size.
* ``method.decode_chunk``: images per VAE decode and per reward call; only 8-bit host copies of the images are kept
  (for the image grids, on the steps that draw one: ``methods.base.Method.keep_images``), and the reward sees the
  whole batch through :meth:`rewards.base.Reward.score_chunks`.

Results do not depend on the chunk sizes beyond float rounding (fp32 matmuls change in the last bits with the row
count; tests/test_chunked_rollout.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterator

import torch

from models.backbone import Backbone, PromptEmbeds

if TYPE_CHECKING:
    from methods.sde import FlowSDEScheduler


def sample_chunks(
    n: int, rows_per_sample: int, rollout_chunk: int, device: torch.device | None = None
) -> list[torch.Tensor]:
    """Sample indices per transformer call: ``rollout_chunk`` rows, at least one whole sample; made on ``device``
    (the compute device), so no call moves a host index (docs/performance.md#one-host-sync-per-update)."""
    per_call = max(1, int(rollout_chunk) // max(1, rows_per_sample))
    return list(torch.arange(n, device=device).split(per_call))


def pad_rows(idx: torch.Tensor, n: int) -> torch.Tensor:
    """``idx`` extended to ``n`` entries by repeating its last one (a call of ``n`` rows whose extra outputs are
    dropped: ``method.match_update_shapes``, docs/metrics.md#first-update-ratios); ``idx`` itself if not shorter."""
    if n <= idx.shape[0] or idx.shape[0] == 0:
        return idx
    return torch.cat([idx, idx[-1:].expand(n - idx.shape[0])])


def chunked_velocity(
    backbone: Backbone,
    x: torch.Tensor,
    t: torch.Tensor,
    embeds: PromptEmbeds,
    rollout_chunk: int,
    velocity: Callable | None = None,
) -> torch.Tensor:
    """``velocity(x, t, embeds)`` (default ``backbone.velocity``) evaluated ``rollout_chunk`` rows at a time."""
    velocity = velocity or backbone.velocity
    chunks = sample_chunks(x.shape[0], backbone.rows_per_sample, rollout_chunk, x.device)
    out = None
    for idx in chunks:
        v = velocity(x[idx], t[idx], embeds.select(idx))
        if out is None:
            out = v.new_empty((x.shape[0], *v.shape[1:]))
        out[idx] = v
    return out


def chunked_sde_step(
    backbone: Backbone,
    sde: FlowSDEScheduler,
    x: torch.Tensor,
    index: torch.Tensor,
    t: torch.Tensor,
    embeds: PromptEmbeds,
    stochastic: torch.Tensor,
    noise: torch.Tensor,
    rollout_chunk: int,
    want_x0: bool = False,
    pad: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """One sampling step of the whole batch, ``rollout_chunk`` rows at a time: ``(x_next, log_prob (B,), x0)``.

    ``index``, ``t`` and ``stochastic`` are per row (B,),
    ``noise`` the step's standard normal draw for the whole batch; ``x0`` is the predicted clean sample
    (``want_x0``) or None. Each row's result is the one of a whole-batch step with the same velocity: every
    operation after the transformer is row-wise. ``pad``: a last, shorter chunk is padded to the full chunk
    (:func:`pad_rows`) so that every call has the same shape."""
    x_next = torch.empty_like(x)
    log_prob = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
    x0 = torch.empty_like(x) if want_x0 else None
    chunks = sample_chunks(x.shape[0], backbone.rows_per_sample, rollout_chunk, x.device)
    for idx in chunks:
        xi, ii = x[idx], index[idx]
        call = pad_rows(idx, chunks[0].shape[0]) if pad else idx
        v = backbone.velocity(x[call], t[call], embeds.select(call))[: idx.shape[0]]
        out = sde.step(xi, v, ii, stochastic[idx], noise=noise[idx])
        x_next[idx] = out.prev_sample
        log_prob[idx] = out.log_prob.float()
        if x0 is not None:
            x0[idx] = sde.pred_x0(xi, v, ii)
    return x_next, log_prob, x0


def display_copy(images: torch.Tensor) -> torch.Tensor:
    """8-bit host copy of images in [0, 1], what the image grids need (launcher/tracking/plots.py reads it back)."""
    return (images.detach().float().clamp(0, 1) * 255).round().to(torch.uint8).cpu()


def decode_chunks(
    backbone: Backbone,
    latents: torch.Tensor,
    prompts: list[str],
    decode_chunk: int,
    display: list[torch.Tensor] | None,
) -> Iterator[tuple[torch.Tensor, list[str]]]:
    """Decoded images (fp32, no gradients) and their prompts, ``decode_chunk`` at a time; each chunk's
    :func:`display_copy` is appended to ``display`` unless it is None."""
    step = max(1, int(decode_chunk))
    for start in range(0, latents.shape[0], step):  # contiguous chunks: slices, no index tensor to move
        with torch.no_grad():
            images = backbone.decode(latents[start : start + step]).float()
        if display is not None:
            display.append(display_copy(images))
        yield images, prompts[start : start + step]


@torch.no_grad()
def score_in_chunks(
    backbone: Backbone,
    reward: torch.nn.Module,
    latents: torch.Tensor,
    prompts: list[str],
    decode_chunk: int,
    keep_images: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(rewards (B,), display images or None)``: decode and score ``decode_chunk`` images at a time; the 8-bit
    copies are kept only with ``keep_images`` (:attr:`methods.base.Method.keep_images`)."""
    display: list[torch.Tensor] | None = [] if keep_images else None
    chunks = decode_chunks(backbone, latents, prompts, decode_chunk, display)
    score_chunks = getattr(reward, "score_chunks", None)  # rewards.base.Reward; any module scoring images works
    rewards = score_chunks(chunks) if score_chunks else torch.cat([reward(im, p).float() for im, p in chunks])
    return rewards.float(), (torch.cat(display) if display is not None else None)
