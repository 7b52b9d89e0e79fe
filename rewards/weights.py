"""Where a reward model's files come from: a local file, a local folder, or a Hugging Face hub repo id.

``reward.path`` (or any ``*path`` key of a reward) takes any of the three. A local path is used as is. A hub id is
read from the local Hugging Face cache and, when the hub is reachable, downloaded on first use. Offline
(``HF_HUB_OFFLINE=1``, the usual state of cluster compute nodes), a missing file is a :class:`ConfigError` raised by
:func:`require_files` at config validation, before any model is built, naming the file and how to get it.
"""

from __future__ import annotations

import json
import os
import zipfile
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
                check_format(key, p)  # the weights file given directly
                return
            raise ConfigError(f"{key}={source!r} is a file; it must be a folder holding {_describe(files)}")
        for spec in files:
            alts = _alternatives(spec)
            found = [p / a for a in alts if (p / a).exists()]
            if not found:
                raise ConfigError(
                    f"{key}={source!r}: the folder has no {' or '.join(alts)}. Fix: point {key} at "
                    f"a folder holding {_describe(files)}"
                )
            check_format(key, found[0])
        return
    if not hub_offline():
        return  # downloaded (or read from the cache) when the reward is built
    from huggingface_hub import try_to_load_from_cache

    for spec in files:
        cached = [c for c in (try_to_load_from_cache(source, a) for a in _alternatives(spec)) if isinstance(c, str)]
        if not cached:
            raise ConfigError(
                f"{key}={source!r}: {_alternatives(spec)[0]} is not in the local Hugging Face cache and the hub is "
                f"offline (HF_HUB_OFFLINE=1). {_download_hint(key, source, files)}"
            )
        check_format(key, Path(cached[0]))


def check_format(key: str, path: Path) -> None:
    """Raise :class:`ConfigError` when the weights file ``path`` is not what its name says, reading only its header
    (a safetensors header, the zip directory ``torch.save`` writes, a JSON index): a truncated download, a text file
    or another format renamed is found at validation, not as a traceback from the loader after the model is built."""
    problem = format_problem(path)
    if problem:
        raise ConfigError(
            f"{key}: {str(path)!r} {problem}. Fix: download the file again (a cut download has this look), or point "
            f"{key} at the reward's real weights ({', '.join(SAFETENSORS + TORCH_PICKLES)})"
        )


#: the weight formats a reward loads: safetensors, and the zip archive (or legacy pickle) of ``torch.save``
SAFETENSORS = (".safetensors",)
TORCH_PICKLES = (".pt", ".pth", ".bin", ".ckpt")


def format_problem(path: Path) -> str | None:
    """What is wrong with the weights file ``path`` for its suffix (None when its header reads as that format; files
    of other suffixes, such as configs, are not weights and pass)."""
    suffix = path.suffix.lower()
    try:
        if suffix in SAFETENSORS:
            from safetensors import safe_open

            try:
                with safe_open(str(path), framework="pt"):
                    return None  # the header parsed: tensor names, dtypes and offsets that fit the file
            except Exception as e:  # safetensors raises SafetensorError (and OSError) for a bad header
                return f"is not a safetensors file ({str(e).splitlines()[0] if str(e) else type(e).__name__})"
        if suffix in TORCH_PICKLES:
            if zipfile.is_zipfile(path):
                return None  # torch.save's archive (weights_only loading then refuses anything but tensors)
            with path.open("rb") as f:
                head = f.read(2)
            # torch.save's legacy format is a pickle, which starts with the PROTO opcode 0x80 and a protocol <= 5
            if len(head) == 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
                return None
            return "is neither a torch.save archive (zip) nor a pickle, so it holds no torch weights"
        if path.name.endswith(".index.json"):
            json.loads(path.read_text(encoding="utf-8"))["weight_map"]
    except OSError as e:
        return f"cannot be read ({e.strerror})"
    except (ValueError, KeyError, TypeError):
        return "is not a sharded-weights index (JSON with a 'weight_map')"
    return None


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


def load_tensors(key: str, path: Path) -> dict:
    """The tensors of a weights file: a ``.safetensors`` file, or a ``torch.save`` file loaded with
    ``weights_only=True`` (a dict of tensors, possibly under ``state_dict``). A file that holds more than tensors is a
    :class:`ConfigError` naming ``key`` and how to convert it once where the file is trusted."""
    import pickle

    import torch

    if path.suffix.lower() in SAFETENSORS:
        from safetensors.torch import load_file

        return load_file(str(path))
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        raise ConfigError(
            f"{key}: {str(path)!r} holds more than tensors, so it cannot be loaded with weights_only=True "
            f"({str(e).splitlines()[0]}). Fix: convert it once where you trust the file: python -c \"import torch, "
            f"safetensors.torch as s; sd = torch.load('{path}', weights_only=False); s.save_file({{k: v.contiguous() "
            f"for k, v in sd.get('state_dict', sd).items()}}, '{path.with_suffix('.safetensors')}')\" and set {key} to "
            f"the .safetensors file"
        ) from None
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    if not isinstance(state, dict):
        raise ConfigError(f"{key}: {str(path)!r} holds a {type(state).__name__}, not a dict of tensors")
    return state
