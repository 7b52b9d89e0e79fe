"""``model.text_encoders=precompute``: every prompt of the run encoded once at start, kept on disk, encoders freed
(docs/memory.md#text-conditioning).

Each rank encodes its share of the prompt set (``prompts[rank::world]``) and streams it to disk as safetensors files
of about ``PART_BYTES`` each (never its whole share in RAM), in a folder keyed by the model (path and text-encoder
files), the encoder settings (sequence length, dtype) and the prompt set itself; rank 0 writes ``index.json`` last, which marks the folder complete. A later run with the same key,
at any rank count, reads the folder and makes no encoder call. Entries are read lazily with safetensors'
``safe_open``, so the host holds only the prompts in use (the backbone's LRU prompt cache), not the whole set.

The cache folder must be visible to every rank (a shared file system on multi-node SLURM jobs): it defaults to
``$REWARDFLOW_CACHE/text`` (``~/.cache/rewardflow/text``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

import torch

log = logging.getLogger(__name__)

FORMAT = 2  # bump when the layout below changes, so old folders are not read (2: several parts per rank)
ENCODE_BATCH = 8  # prompts per encoder call while precomputing
#: bytes of encoded prompts a rank holds before writing them out as one part (256 FLUX T5 prompts): the host cost of
#: precomputing is this, whatever the prompt set's size (docs/memory.md#text-conditioning)
PART_BYTES = 1 << 30
INDEX = "index.json"


def prompt_set_key(prompts: list[str]) -> str:
    return hashlib.sha1(json.dumps(sorted(set(prompts))).encode()).hexdigest()[:12]


def text_encoder_fingerprint(folder: Path, subfolders: list[str]) -> dict:
    """What identifies the text encoders of a local model folder without reading weights: their configs and the
    names and sizes of their weight files."""
    out = {}
    for sub in subfolders:
        d = folder / sub
        if not d.is_dir():
            continue
        config = d / "config.json"
        out[sub] = {
            "config": config.read_text() if config.exists() else None,
            "files": sorted((p.name, p.stat().st_size) for p in d.iterdir() if p.is_file()),
        }
    return out


def cache_key(model: dict, settings: dict, prompts: list[str]) -> str:
    blob = json.dumps(
        {"format": FORMAT, "model": model, "settings": settings, "prompts": prompt_set_key(prompts)},
        sort_keys=True,
        default=str,
    )
    return hashlib.sha1(blob.encode()).hexdigest()[:16]


class PrecomputedText:
    """A complete cache folder: ``lookup(prompts)`` returns each prompt's entry (a dict of CPU tensors)."""

    def __init__(self, folder: Path):
        from safetensors import safe_open

        self.folder = folder
        index = json.loads((folder / INDEX).read_text())
        self.position = {p: (part, i) for part, entries in index["parts"].items() for p, i in entries}
        self.names = index["names"]
        self._open = safe_open
        self._files: dict[str, object] = {}  # parts opened on first use (a large set has thousands)

    def __len__(self) -> int:
        return len(self.position)

    def lookup(self, prompts: list[str]) -> list[dict[str, torch.Tensor]]:
        out = []
        for p in prompts:
            if p not in self.position:
                raise RuntimeError(
                    f"prompt {p!r} is not in the precomputed text conditioning ({self.folder}): "
                    f"model.text_encoders=precompute encodes the data's prompts once at start. "
                    f"Fix: model.text_encoders=offload to encode prompts met later"
                )
            part, i = self.position[p]
            if part not in self._files:
                self._files[part] = self._open(str(self.folder / part), framework="pt")
            handle: Any = self._files[part]
            out.append({n: handle.get_tensor(f"{i}.{n}") for n in self.names})
        return out


def _write_parts(
    folder: Path, mine: list[tuple[int, str]], encode: Callable[[list[str]], list[dict]], stem: str
) -> tuple[dict[str, list], set[str]]:
    """Encode ``mine`` ((index, prompt) pairs) ``ENCODE_BATCH`` at a time into safetensors files ``<stem>-<k>`` of
    about ``PART_BYTES`` each: the host holds one part's tensors at a time, not the rank's share (FLUX's T5: 4 MiB per
    prompt, 4 TiB for a million prompts). Returns ``{part: [[prompt, index], ...]}`` and the tensor names."""
    from safetensors.torch import save_file

    parts: dict[str, list] = {}
    names: set[str] = set()
    tensors: dict[str, torch.Tensor] = {}
    entries: list = []
    held = 0

    def flush() -> None:
        nonlocal tensors, entries, held
        if entries:
            part = f"{stem}-{len(parts):05d}.safetensors"
            save_file(tensors, str(folder / part))
            parts[part] = entries
        tensors, entries, held = {}, [], 0

    for start in range(0, len(mine), ENCODE_BATCH):
        batch = mine[start : start + ENCODE_BATCH]
        for (i, prompt), entry in zip(batch, encode([p for _, p in batch])):
            for n, v in entry.items():
                tensors[f"{i}.{n}"] = v.detach().to("cpu").contiguous().clone()
                held += tensors[f"{i}.{n}"].nbytes
                names.add(n)
            entries.append([prompt, i])
        if held >= PART_BYTES:
            flush()
    flush()
    return parts, names


def build_or_load(
    root: Path, key: str, prompts: list[str], encode: Callable[[list[str]], list[dict]], world
) -> tuple[PrecomputedText, bool]:
    """The cache folder ``root/<key>`` for ``prompts`` (unique), built by every rank of ``world`` if absent.
    Returns the store and whether it was reused. A collective: call on every rank."""
    from rewardflow.distributed import all_gather_objects, barrier, broadcast_object

    folder = root / key
    if (folder / INDEX).exists():
        return PrecomputedText(folder), True
    prompts = sorted(set(prompts))
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(broadcast_object(tempfile.mkdtemp(prefix=f".{key}-", dir=root) if world.is_main else None))
    parts, names = _write_parts(
        tmp,
        [(i, prompts[i]) for i in range(world.rank, len(prompts), world.world_size)],
        encode,
        f"part-{world.rank:05d}-of-{world.world_size:05d}",
    )
    gathered = all_gather_objects((parts, sorted(names)))  # every part is written once this returns
    if world.is_main:
        index = {
            "parts": {p: e for ps, _ in gathered for p, e in ps.items()},
            "names": sorted({n for _, ns in gathered for n in ns}),
            "prompts": len(prompts),
        }
        (tmp / INDEX).write_text(json.dumps(index))
        try:
            os.rename(tmp, folder)
        except OSError:  # another run finished the same folder first: use theirs
            shutil.rmtree(tmp, ignore_errors=True)
    barrier()
    return PrecomputedText(folder), False
