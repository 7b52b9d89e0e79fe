"""Config of reward=server: scores come from an HTTP reward server (GenEval's detector, OCR, UnifiedReward, any
model that needs its own environment or GPU), posted in batches with timeouts and retries (docs/rewards.md#reward-server)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Optional
from urllib.parse import urlsplit

from rewardflow.errors import ConfigErrors
from rewards.base_config import RewardConfig


class Protocol(StrEnum):
    """What is posted and what comes back."""

    # Flow-Factory's reward server (reward_server/example_server.py): JSON {"prompt": [...], "image": [base64 PNG]}
    # -> JSON {"rewards": [...]}
    json = "json"
    # flow_grpo's reward servers (GenEval, DeQA): a pickled {"images": [JPEG bytes], "prompts": [...]} -> a pickled
    # dict with the scores under response_key ("scores"), read with an unpickler that builds no objects but
    # containers and numbers
    pickle = "pickle"


def url_problem(url: str) -> str | None:
    """Why ``url`` cannot be posted to (None when it can): checked at validation, before anything is built."""
    if not url or url != url.strip() or any(c.isspace() for c in url):
        return "is empty or holds whitespace"
    try:
        parts = urlsplit(url)
        port = parts.port  # raises on a port that is not a number in 0-65535
    except ValueError as e:
        return f"is not a URL ({e})"
    if parts.scheme not in ("http", "https"):
        return f"has scheme {parts.scheme or 'none'!r}; the reward server is reached over http:// or https://"
    if not parts.hostname:
        return "names no host"
    if port == 0:
        return "has port 0"
    return None


@dataclass
class ServerRewardConfig(RewardConfig):
    _target_: str = "rewards.server.ServerReward"
    name: str = "server"
    url: str = "http://127.0.0.1:8000/compute"  # the endpoint posted to (Flow-Factory's example server's)
    protocol: Protocol = Protocol.json
    response_key: Optional[str] = None  # where the scores are in the response; null: rewards (json), scores (pickle)
    batch_size: int = 16  # images per request
    timeout_s: float = 60.0  # per request (connect and read)
    retries: int = 3  # further tries of a request that timed out, could not connect or got HTTP 5xx / 408 / 429
    backoff_s: float = 1.0  # wait before retry k (1, 2, ...): backoff_s * 2 ** (k - 1)

    @classmethod
    def check(cls, cfg: Any, errors: ConfigErrors) -> None:
        super().check(cfg, errors)
        r, key = cfg.reward, errors.key("reward")
        problem = url_problem(r.url)
        errors.require(
            problem is None,
            "reward.url",
            f"{r.url!r} {problem}. Fix: {key}.url=http://HOST:PORT/PATH, the reward server's endpoint (e.g. "
            f"http://127.0.0.1:8000/compute for a Flow-Factory server)",
        )
        errors.require(r.batch_size >= 1, "reward.batch_size", f"must be >= 1 (got {r.batch_size})")
        errors.require(r.timeout_s > 0, "reward.timeout_s", f"must be > 0 seconds (got {r.timeout_s})")
        errors.require(r.retries >= 0, "reward.retries", f"must be >= 0 (got {r.retries})")
        errors.require(r.backoff_s >= 0, "reward.backoff_s", f"must be >= 0 seconds (got {r.backoff_s})")
        errors.require(
            r.response_key is None or bool(r.response_key),
            "reward.response_key",
            "is empty. Fix: null (rewards for protocol=json, scores for protocol=pickle) or the response's key",
        )


SCHEMAS = {"reward": {"server": ServerRewardConfig}}
