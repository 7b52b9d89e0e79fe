"""Where a reward model's files come from: a local file, a local folder, or a Hugging Face hub repo id.

``reward.path`` (or any ``*path`` key of a reward) takes any of the three. A local path is used as is. A hub id is
read from the local Hugging Face cache and, when the hub is reachable, downloaded on first use. Offline
(``HF_HUB_OFFLINE=1``, the usual state of cluster compute nodes), a missing file is a :class:`ConfigError` raised by
:func:`require_files` at config validation, before any model is built, naming the file and how to get it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from rewardflow.errors import ConfigError

#: one entry per needed file; a tuple lists acceptable alternatives (e.g. safetensors or a pickle .bin)
FileSpec = Sequence["str | tuple[str, ...]"]

HF_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
HF_PROCESSOR = [("preprocessor_config.json", "processor_config.json"), ("tokenizer.json", "vocab.json")]


def hub_offline() -> bool:
    from huggingface_hub import constants

    env = os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")
    return env or bool(constants.HF_HUB_OFFLINE)


WEIGHT_SUFFIXES = (".pt", ".pth", ".bin", ".safetensors", ".json", ".ckpt")


def is_local(source: str) -> bool:
    """A path (existing, or written like one) rather than a hub id ``owner/name`` (which may contain dots)."""
    if Path(source).expanduser().exists():
        return True
    return source.startswith(("/", ".", "~")) or source.count("/") != 1 or source.endswith(WEIGHT_SUFFIXES)


def _alternatives(spec) -> tuple[str, ...]:
    return (spec,) if isinstance(spec, str) else tuple(spec)


def _download_hint(key: str, repo: str, files: FileSpec) -> str:
    local = repo.split("/")[-1]
    what = f"{repo} {_alternatives(files[0])[0]}" if len(files) == 1 else repo  # one file, or the whole repo
    return (
        f"Fix: on a machine with internet run `hf download {what} --local-dir {local}` "
        f"(https://huggingface.co/{repo}), copy {local}/ here and set {key}=/path/to/{local}; or copy a "
        f"Hugging Face cache holding it to $HF_HOME"
    )


def require_files(key: str, source: str, files: FileSpec, allow_file: bool = False) -> None:
    """Raise :class:`ConfigError` if ``source`` cannot provide ``files`` without downloading and the hub is offline,
    or if a local path does not exist. ``key`` is the config key shown in the message (e.g. ``reward.path``);
    ``allow_file``: a local path may be the (single) weights file itself rather than a folder."""
    if is_local(source):
        p = Path(source).expanduser()
        if not p.exists():
            raise ConfigError(
                f"{key}={source!r}: no such file or folder. Fix: point {key} at the local weights "
                f"(a folder holding {_describe(files)}), or at a hub id such as 'owner/name'"
            )
        if p.is_file():
            if allow_file:
                return  # the weights file given directly
            raise ConfigError(f"{key}={source!r} is a file; it must be a folder holding {_describe(files)}")
        for spec in files:
            alts = _alternatives(spec)
            if not any((p / a).exists() for a in alts):
                raise ConfigError(
                    f"{key}={source!r}: the folder has no {' or '.join(alts)}. Fix: point {key} at "
                    f"a folder holding {_describe(files)}"
                )
        return
    if not hub_offline():
        return  # downloaded (or read from the cache) when the reward is built
    from huggingface_hub import try_to_load_from_cache

    for spec in files:
        alts = _alternatives(spec)
        if not any(isinstance(try_to_load_from_cache(source, a), str) for a in alts):
            raise ConfigError(
                f"{key}={source!r}: {alts[0]} is not in the local Hugging Face cache and the hub is "
                f"offline (HF_HUB_OFFLINE=1). {_download_hint(key, source, files)}"
            )


def fetch_file(source: str, filename: str) -> Path:
    """Local path of ``filename`` from ``source``: the file itself, ``folder/filename``, or the hub cache
    (downloading it when the hub is reachable)."""
    if is_local(source):
        p = Path(source).expanduser()
        return p if p.is_file() else p / filename
    from huggingface_hub import hf_hub_download

    return Path(hf_hub_download(source, filename))


def _describe(files: FileSpec) -> str:
    return ", ".join(" or ".join(_alternatives(s)) for s in files)
