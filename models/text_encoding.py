"""Text conditioning of a diffusers backbone: its frozen text encoders and what each prompt encodes to.

Owns: :class:`PromptCache` (per-prompt conditioning, least recently used, kept off the accelerator) and
:class:`TextEncodingMixin`: where the encoders live (``model.text_encoders``: on the device, or offloaded to the CPU
between calls), the negative prompt's conditioning, releasing the encoders, and ``precompute_text`` (every training
prompt encoded once into a cache folder, ``models/text_cache.py``, then the encoders freed). A family supplies only
``_encode`` (its pipeline's own prompt encoding) and assembles the batch in ``encode_prompts``.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

import torch
from torch import nn

from models.common_config import TextEncoders
from rewardflow.distributed import current_world

if TYPE_CHECKING:
    from models.loading import ComponentLoader
    from models.text_cache import PrecomputedText

log = logging.getLogger(__name__)

#: a family's ``_encode``: prompts -> one dict of tensors per prompt
Encode = Callable[[list[str]], list[dict[str, torch.Tensor]]]


class PromptCache:
    """Least-recently-used cache of per-prompt text conditioning (a dict of tensors per prompt string), bounded in
    entries (``max_items``) and in bytes (``max_bytes``; None: no bound): FLUX's T5 entry is 4 MiB, so a count alone
    let 4096 prompts hold 16 GiB per rank. The entries of the batch being assembled are returned even when they alone
    exceed the bound; they are then not kept.

    Entries live on ``store_device`` (the CPU when the model runs on an accelerator, so thousands of cached T5 / Qwen
    embeddings never take GPU memory) and are moved to the model's device when a batch is assembled.
    """

    def __init__(self, max_items: int | None, store_device: torch.device, max_bytes: int | None = None):
        self.max_items = max_items
        self.max_bytes = max_bytes
        self.store_device = store_device
        self._items: OrderedDict[str, dict[str, torch.Tensor]] = OrderedDict()
        self.nbytes = 0  # bytes of the cached entries

    @staticmethod
    def _size(entry: dict[str, torch.Tensor]) -> int:
        return sum(v.numel() * v.element_size() for v in entry.values())

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, prompt: str) -> bool:
        return prompt in self._items

    def get(self, prompts: list[str], encode: Encode) -> list[dict[str, torch.Tensor]]:
        """Entries for ``prompts`` (duplicates allowed); ``encode`` is called once with the uncached unique ones."""
        found = {p: self._items[p] for p in dict.fromkeys(prompts) if p in self._items}
        missing = [p for p in dict.fromkeys(prompts) if p not in found]
        if missing:
            for p, entry in zip(missing, encode(missing)):
                found[p] = {k: v.detach().to(self.store_device) for k, v in entry.items()}
                self._items[p] = found[p]
                self.nbytes += self._size(found[p])
        for p in found:
            if p in self._items:
                self._items.move_to_end(p)
        while self._items and (
            (self.max_items is not None and len(self._items) > self.max_items)
            or (self.max_bytes is not None and self.nbytes > self.max_bytes)
        ):
            self.nbytes -= self._size(self._items.popitem(last=False)[1])
        return [found[p] for p in prompts]


class TextEncodingMixin:
    """Set up by ``_init_text_encoding`` (from ``DiffusersBackbone._init_common``) and ``_place_text_encoders`` (from
    ``_init_training``, once the family has loaded its encoders)."""

    # set by DiffusersBackbone._init_common / the family's constructor
    name: str
    family: str
    path: str
    device: torch.device
    dtype: torch.dtype
    text_encoders: TextEncoders
    max_sequence_length: int
    loader: ComponentLoader
    pipe: Any
    negative_prompt: str
    do_cfg: bool  # models/guidance.py

    def _init_text_encoding(self, cfg: Any) -> None:
        """``cfg``: the family's DiffusersModelConfig (``prompt_cache_size``, ``prompt_cache_gib``)."""
        self.offload_text_encoders = self.text_encoders != TextEncoders.device and self.device.type != "cpu"
        store = torch.device("cpu") if self.device.type != "cpu" else self.device
        gib = cfg.prompt_cache_gib
        self._prompt_cache = PromptCache(cfg.prompt_cache_size, store, None if gib is None else int(gib * 2**30))
        self._neg_cache: dict[str, dict[str, torch.Tensor]] = {}
        self._text_encoders: list[nn.Module] | None = []
        self._precomputed: PrecomputedText | None = None  # once loaded

    def _place_text_encoders(self, text_encoders: list[nn.Module]) -> None:
        self._text_encoders = list(text_encoders)
        for m in self._text_encoders:
            m.to("cpu" if self.offload_text_encoders else self.device)

    def _encode(self, prompts: list[str]) -> list[dict[str, torch.Tensor]]:
        """The text encoders' tensors of each prompt (the family's own encoding; every family defines it)."""
        raise NotImplementedError

    @contextlib.contextmanager
    def _text_encoders_ready(self) -> Iterator[None]:
        """Text encoders on the model's device for the duration of one encoding call (offload: back to the CPU
        afterwards, and the accelerator's cache emptied)."""
        if self._text_encoders is None:
            raise RuntimeError(
                "the text encoders were released (release_text_encoders()); only cached prompts can be encoded"
            )
        if not self.offload_text_encoders:
            yield
            return
        for m in self._text_encoders:
            m.to(self.device)
        try:
            yield
        finally:
            for m in self._text_encoders:
                m.to("cpu")
            if self.device.type == "cuda":
                torch.cuda.empty_cache()

    def release_text_encoders(self) -> None:
        """Free the text encoders (e.g. after every training prompt has been encoded once). Cached prompts and the
        negative prompt keep working; a new prompt then raises."""
        for attr in ("text_encoder", "text_encoder_2", "text_encoder_3"):
            if getattr(self.pipe, attr, None) is not None:
                setattr(self.pipe, attr, None)
        self._text_encoders = None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def _run_encoders(self, encode: Encode, prompts: list[str]) -> list[dict[str, torch.Tensor]]:
        """``encode(prompts)``, or their precomputed entries once :meth:`precompute_text` has run."""
        if self._precomputed is not None:
            return self._precomputed.lookup(prompts)
        with torch.no_grad(), self._text_encoders_ready():
            return encode(prompts)

    def _encode_cached(self, prompts: list[str], encode: Encode) -> list[dict[str, torch.Tensor]]:
        return self._prompt_cache.get(list(prompts), lambda missing: self._run_encoders(encode, missing))

    def _negative(self, prompt: str, encode: Encode) -> dict[str, torch.Tensor]:
        """Conditioning of the negative prompt, encoded once and kept on the model's device."""
        if prompt not in self._neg_cache:
            entry = self._run_encoders(encode, [prompt])[0]
            self._neg_cache[prompt] = {k: v.detach().to(self.device) for k, v in entry.items()}
        return self._neg_cache[prompt]

    def precompute_text(self, prompts: list[str], cache_dir: str | os.PathLike | None = None) -> bool:
        """``model.text_encoders=precompute``: encode ``prompts`` (and the negative prompt) once, each rank its
        share, into a cache folder keyed by model, encoder settings and prompt set (``models/text_cache.py``), then
        free the encoders; training makes no encoder call. Call on every rank. Returns whether the cache was
        reused."""
        from models.text_cache import build_or_load, cache_key, text_encoder_fingerprint
        from models.twins import default_cache_dir

        wanted = list(prompts) + ([self.negative_prompt] if self.do_cfg else [])
        encoders = ["text_encoder", "text_encoder_2", "text_encoder_3"]
        model = {
            "family": self.family,
            "path": self.path,
            "text_encoders": (
                text_encoder_fingerprint(Path(os.path.expanduser(self.path)), encoders)
                if self.loader.is_local
                else None
            ),
        }
        settings = {
            "max_sequence_length": getattr(self, "max_sequence_length", None),
            "dtype": str(self.dtype),
            "backbone": type(self).__name__,
        }
        root = Path(cache_dir) if cache_dir else default_cache_dir() / "text"
        key = f"{self.name}-{cache_key(model, settings, wanted)}"
        store, reused = build_or_load(
            root, key, wanted, lambda batch: self._run_encoders(self._encode, batch), current_world()
        )
        self._precomputed = store
        self.release_text_encoders()
        log.info(
            "text conditioning of %d prompts %s %s; text encoders freed",
            len(store),
            "read from" if reused else "precomputed into",
            store.folder,
        )
        return reused
