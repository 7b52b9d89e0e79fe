"""Loading a family's components from ``model.path`` (a local folder laid out like the family's diffusers repository,
or a hub id), and the device policy they are loaded for.

Owns: :func:`resolve_device`; :class:`ModelLoadError` and :class:`ComponentLoader`, which check that every component
is there (a folder's files, or the HF cache when offline) *before* anything is built, and turn ``from_pretrained``
failures into one message naming ``model.path``, the component and the fix; and :class:`LoadingMixin`, the
backbone's ``_load`` / ``_load_frozen`` / ``_load_transformer`` (in the manner of diffusers' loader mixins).
Nothing here knows about fine-tuning, text conditioning or sharding beyond the storage dtype a transformer is loaded
in and whether the sharded start-up builds it on the meta device.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import torch
from torch import nn

from rewardflow.errors import ConfigError, require


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(str(device))


class ModelLoadError(ConfigError):
    """A model folder or hub id that cannot be loaded; the message names ``model.path``, the component and the fix.
    A :class:`ConfigError`, so the CLI reports it as a message before any training starts."""


#: file whose presence marks a component as downloaded, by component kind
_MARKERS = {"tokenizer": "tokenizer_config.json", "scheduler": "scheduler_config.json"}


def _marker(subfolder: str) -> str:
    return _MARKERS.get(subfolder.rstrip("_0123456789"), "config.json")


def _offline() -> bool:
    import huggingface_hub.constants as hc

    env = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
    return bool(hc.HF_HUB_OFFLINE) or env


def looks_like_hub_id(path: str) -> bool:
    """``org/name`` with no leading ``/``, ``.`` or ``~`` and no further slashes."""
    return (
        not path.startswith(("/", ".", "~"))
        and path.count("/") == 1
        and not path.endswith("/")
        and not os.path.exists(path)
    )


class ComponentLoader:
    """Loads the components of one model folder or hub id (``model.path``) and explains failures.

    Args:
        path: a local folder laid out like the family's diffusers repository, or a hub id.
        family: the family's display name for messages (e.g. ``"FLUX.1"``).
        hub_id: the family's canonical hub id, for the download hint.
    """

    def __init__(self, path: str, family: str, hub_id: str):
        self.path, self.family, self.hub_id = str(path), family, hub_id
        self.is_local = os.path.isdir(os.path.expanduser(self.path))

    def fetch_hint(self) -> str:
        repo = self.path if looks_like_hub_id(self.path) else self.hub_id
        local = f"/models/{repo.split('/')[-1]}"
        return (
            f"Fix: download it once with network access, `hf download {repo} --local-dir {local}` "
            f"(`huggingface-cli download ...` on older huggingface_hub), then set model.path={local}; or run "
            f"once without HF_HUB_OFFLINE=1 so it lands in the HF cache "
            f"(HF_HOME={os.environ.get('HF_HOME', '~/.cache/huggingface')})."
        )

    def missing(self, subfolders: Sequence[str]) -> list[str]:
        """Components that are certainly not available (local folder: absent; hub id: not cached while offline)."""
        path = os.path.expanduser(self.path)
        if self.is_local:
            return [s for s in subfolders if not os.path.isfile(os.path.join(path, s, _marker(s)))]
        if not looks_like_hub_id(self.path):
            return list(subfolders)  # a folder that does not exist
        if not _offline():
            return []  # from_pretrained may download; failures are wrapped
        from huggingface_hub import try_to_load_from_cache

        return [s for s in subfolders if not isinstance(try_to_load_from_cache(self.path, f"{s}/{_marker(s)}"), str)]

    def check(self, subfolders: Sequence[str]) -> None:
        """Fail before anything is built if a component is missing."""
        missing = self.missing(subfolders)
        if not missing:
            return
        if not self.is_local and not looks_like_hub_id(self.path):
            raise ModelLoadError(
                f"model.path={self.path!r} is neither an existing folder nor a hub id "
                f"(org/name) of a {self.family} checkpoint. {self.fetch_hint()}"
            )
        where = "in the folder" if self.is_local else "in the local Hugging Face cache (HF_HUB_OFFLINE=1)"
        raise ModelLoadError(
            f"model.path={self.path!r}: {self.family} component(s) {', '.join(missing)} not found "
            f"{where} (expected {', '.join(f'{m}/{_marker(m)}' for m in missing)}). "
            f"{self.fetch_hint()}"
        )

    def load(self, cls, subfolder: str, **kwargs):
        """``cls.from_pretrained(path, subfolder=...)`` with any loading failure turned into :class:`ModelLoadError`."""
        try:
            return cls.from_pretrained(os.path.expanduser(self.path), subfolder=subfolder, **kwargs)
        except (OSError, ValueError) as e:
            reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ModelLoadError(
                f"model.path={self.path!r}: cannot load the {self.family} component '{subfolder}' "
                f"({cls.__name__}): {reason}. {self.fetch_hint()}"
            ) from e

    def load_config(self, cls, subfolder: str) -> dict:
        try:
            return cls.load_config(os.path.expanduser(self.path), subfolder=subfolder)
        except (OSError, ValueError) as e:
            raise ModelLoadError(
                f"model.path={self.path!r}: cannot read the {self.family} '{subfolder}' config: "
                f"{e}. {self.fetch_hint()}"
            ) from e


class LoadingMixin:
    """The backbone's loading calls, made by each family's constructor after ``_init_common`` has set the device
    policy and checked the components (``models/common.py``)."""

    # set by DiffusersBackbone._init_common
    loader: ComponentLoader
    path: str
    height: int
    width: int
    dtype: torch.dtype
    finetune: str
    _sharded_startup: bool
    # set by _load_transformer
    _transformer_cls: Any
    _transformer_subfolder: str

    def _require_image_size(self, multiple: int) -> None:
        """The loaded checkpoint's own size rule (its VAE may differ from the published one ``check`` assumes)."""
        for key in ("height", "width"):
            value = getattr(self, key)
            require(
                value % multiple == 0,
                f"model.{key}",
                f"must be a multiple of {multiple} for the VAE of model.path={self.path!r} (got {value})",
            )

    def _load(self, cls, subfolder: str, **kwargs):
        return self.loader.load(cls, subfolder, **kwargs)

    def _load_frozen(self, cls, subfolder: str):
        """A frozen component (text encoder, VAE) in the compute dtype, in eval mode."""
        return self._load(cls, subfolder, torch_dtype=self.dtype).requires_grad_(False).eval()

    def _load_transformer(self, cls, subfolder: str = "transformer") -> nn.Module:
        """The transformer in its storage dtype: fp32 master weights for full fine-tuning, the compute dtype for a
        frozen LoRA base (docs/memory.md#weights-and-their-dtypes). Under a process group of several ranks it is
        only built on the meta device: :meth:`parallelize` shards it and each rank reads its own shards
        (``models/sharded_load.py``)."""
        from models.sharded_load import build_on_meta, cast_like_from_pretrained

        # remembered for the sharded start-up's shard load (models/sharding.py) and the full export (models/export.py)
        self._transformer_cls, self._transformer_subfolder = cls, subfolder
        dtype = self.dtype if self.finetune == "lora" else torch.float32
        if self._sharded_startup:
            return cast_like_from_pretrained(build_on_meta(cls, self.loader.load_config(cls, subfolder)), dtype)
        return self._load(cls, subfolder, torch_dtype=dtype)
