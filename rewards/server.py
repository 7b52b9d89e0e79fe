"""reward=server: scores from an HTTP reward server, for rewards that need their own environment or GPU (GenEval's
mmdet detector, OCR, UnifiedReward), as Flow-Factory's ``RemotePointwiseRewardModel`` and flow_grpo's GenEval/DeQA
clients do (docs/rewards.md#reward-server).

Images go in requests of ``reward.batch_size``, as 8-bit RGB: ``protocol=json`` posts Flow-Factory's
``{"prompt": [...], "image": [base64 PNG]}`` and reads ``{"rewards": [...]}``; ``protocol=pickle`` posts flow_grpo's
pickled ``{"images": [JPEG bytes], "prompts": [...]}`` and reads a pickled dict's ``scores`` with an unpickler that
builds nothing but containers, numbers and numpy scalars/arrays. Videos are posted frame by frame and reduced by
``reward.frame_reduce``.

When the server fails. A request that times out (``reward.timeout_s``), cannot connect, or gets HTTP 5xx / 408 / 429 is
tried again ``reward.retries`` times, after ``backoff_s``, ``2 backoff_s``, ... seconds. A request that still fails,
or gets another HTTP error or an unreadable answer (wrong count, not numbers), gives NaN to its samples and to the
call's remaining ones (not sent: the server is not waited on again in the same call), with one warning naming the URL,
what happened and the fix. The trainer then skips that step's update as for any non-finite reward: the step is logged
(``health/skipped_updates`` 1, ``reward/server_failed`` the samples without a score), is not checkpointed, and the
run goes on with the next step; ``trainer.max_nonfinite_in_a_row`` such steps in a row stop the run with a message.
An evaluation scored while the server is down logs NaN for this reward.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import pickle
import time
import urllib.error
import urllib.request

import numpy as np
import torch

from rewards.base import Reward
from rewards.server_config import Protocol, ServerRewardConfig

log = logging.getLogger(__name__)

#: HTTP statuses worth a retry: the server is overloaded or restarting, or timed out itself
RETRY_STATUSES = (408, 429)


class ServerFailure(RuntimeError):
    """A request that got no usable scores; ``retry``: whether trying again may help."""

    def __init__(self, message: str, retry: bool):
        super().__init__(message)
        self.retry = retry


class _ContainersOnly(pickle.Unpickler):
    """Builds dicts, lists, strings and numbers, and numpy scalars and arrays of numbers: nothing that runs code."""

    ALLOWED = {
        ("numpy", "dtype"),
        ("numpy", "ndarray"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
    }

    def find_class(self, module, name):
        if (module, name) in self.ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"the response holds a {module}.{name}; only containers and numbers are read")


def to_uint8(images: torch.Tensor) -> np.ndarray:
    """(B, 3, H, W) in [0, 1] -> (B, H, W, 3) uint8, rounded (as flow_grpo's clients)."""
    return (images.detach().float().clamp(0, 1) * 255).round().to(torch.uint8).permute(0, 2, 3, 1).cpu().numpy()


def encode(image: np.ndarray, fmt: str) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format=fmt)
    return buffer.getvalue()


class ServerReward(Reward[ServerRewardConfig]):
    differentiable = False

    def __init__(self, cfg: ServerRewardConfig):
        super().__init__(cfg)
        self.url, self.protocol = cfg.url, Protocol(cfg.protocol)
        self.response_key = cfg.response_key or ("rewards" if self.protocol == Protocol.json else "scores")
        self.batch_size, self.timeout_s = int(cfg.batch_size), float(cfg.timeout_s)
        self.retries, self.backoff_s = int(cfg.retries), float(cfg.backoff_s)
        self.failed = 0  # samples without a score since the last step_metrics()

    # -- one request ----------------------------------------------------------------------------------------------
    def body(self, images: np.ndarray, prompts: list[str]) -> tuple[bytes, str]:
        if self.protocol == Protocol.json:
            payload = {"prompt": prompts, "image": [base64.b64encode(encode(im, "PNG")).decode() for im in images]}
            return json.dumps(payload).encode(), "application/json"
        return pickle.dumps(
            {"images": [encode(im, "JPEG") for im in images], "prompts": prompts}
        ), "application/octet-stream"

    def parse(self, raw: bytes, n: int) -> list[float]:
        try:
            if self.protocol == Protocol.json:
                data = json.loads(raw)
            else:
                data = _ContainersOnly(io.BytesIO(raw)).load()
        except (ValueError, pickle.UnpicklingError, EOFError) as e:
            raise ServerFailure(f"its answer is not {self.protocol.value} ({e}): {raw[:120]!r}", retry=False) from None
        if not isinstance(data, dict) or self.response_key not in data:
            keys = sorted(data) if isinstance(data, dict) else type(data).__name__
            raise ServerFailure(
                f"its answer has no {self.response_key!r} (it has {keys}). Fix: reward.response_key=<the key of the "
                f"scores>, or reward.protocol",
                retry=False,
            )
        try:
            scores = [float(s) for s in np.asarray(data[self.response_key], dtype=np.float64).reshape(-1)]
        except (TypeError, ValueError) as e:
            raise ServerFailure(f"its {self.response_key!r} are not numbers ({e})", retry=False) from None
        if len(scores) != n:
            raise ServerFailure(f"it returned {len(scores)} scores for {n} images", retry=False)
        return scores

    def post(self, body: bytes, content_type: str) -> bytes:
        request = urllib.request.Request(self.url, data=body, headers={"Content-Type": content_type}, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return response.read()
        except urllib.error.HTTPError as e:
            detail = e.read()[:200].decode(errors="replace").strip()
            retry = e.code >= 500 or e.code in RETRY_STATUSES
            raise ServerFailure(f"HTTP {e.code} {e.reason}{': ' + detail if detail else ''}", retry) from None
        except TimeoutError:  # socket.timeout is TimeoutError
            raise ServerFailure(f"timed out after {self.timeout_s:g} s (reward.timeout_s)", retry=True) from None
        except urllib.error.URLError as e:
            if isinstance(e.reason, TimeoutError):
                raise ServerFailure(f"timed out after {self.timeout_s:g} s (reward.timeout_s)", retry=True) from None
            raise ServerFailure(f"cannot be reached ({e.reason})", retry=True) from None
        except (ConnectionError, OSError) as e:  # reset or closed mid-answer
            raise ServerFailure(f"broke the connection ({e})", retry=True) from None

    def request(self, images: np.ndarray, prompts: list[str]) -> list[float]:
        """Scores of one batch, with retries and backoff; raises :class:`ServerFailure` when they run out."""
        body, content_type = self.body(images, prompts)
        for attempt in range(self.retries + 1):
            try:
                return self.parse(self.post(body, content_type), len(images))
            except ServerFailure as e:
                if not e.retry or attempt == self.retries:
                    tries = f" after {attempt + 1} tries" if attempt else ""
                    raise ServerFailure(f"{e}{tries}", retry=False) from None
                time.sleep(self.backoff_s * 2**attempt)
        raise AssertionError("unreachable")

    # -- the reward -----------------------------------------------------------------------------------------------
    def score(self, images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        pixels = to_uint8(images)
        scores = [float("nan")] * len(prompts)
        for start in range(0, len(prompts), self.batch_size):
            stop = start + self.batch_size
            try:
                scores[start:stop] = self.request(pixels[start:stop], prompts[start:stop])
            except ServerFailure as e:
                missing = len(prompts) - start
                self.failed += missing
                log.warning(
                    "reward=server: %s %s; %d of %d samples get no score (NaN), so a training step skips its update. "
                    "Fix: check the server and its log, reward.url, reward.timeout_s",
                    self.url,
                    e,
                    missing,
                    len(prompts),
                )
                break
        return torch.tensor(scores, dtype=torch.float32, device=images.device)

    def step_metrics(self) -> dict[str, float]:
        failed, self.failed = self.failed, 0
        return {"reward/server_failed": float(failed)}

    @torch.no_grad()
    def evaluate(self, images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        failed = self.failed  # the training step's count is not the evaluation's
        try:
            return self(images, prompts)
        finally:
            self.failed = failed
