"""What every diffusers-based family adapter shares: device/dtype policy, loading from a hub id or folder with one clear
error when something is missing offline, LoRA / full fine-tuning with a frozen reference, per-prompt embedding cache
with text-encoder offload, classifier-free guidance in one batched forward, FSDP2 sharding and ``save_pretrained``.

A family adapter (``models/flux.py``, ``models/sd3.py``, ``models/qwenimage.py``, ``models/wan.py``) subclasses
:class:`DiffusersBackbone`, loads its components through :meth:`DiffusersBackbone._load`, and implements prompt
encoding, the latent layout, the transformer call (timestep scale, packing) and decoding.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

import torch
from torch import nn

from models.backbone import Backbone
from models.backbone_config import Finetune
from models.common_config import BaseSharding, DiffusersModelConfig, TextEncoders
from models.frozen_reference import FrozenReference
from models.sigma_grids import static_shift_sigmas
from rewardflow.distributed import current_world
from rewardflow.dtypes import Dtype, torch_dtype
from rewardflow.errors import ConfigError, ConfigErrors, require

if TYPE_CHECKING:
    from models.text_cache import PrecomputedText

log = logging.getLogger(__name__)

ADAPTER_NAME = "default"  # peft's adapter name for the trained LoRA


# ------------------------------------------------------------------------------------------------ device and dtype
def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(str(device))


# ------------------------------------------------------------------------------------------------------- loading
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


# --------------------------------------------------------------------------------------------------- prompt cache
class PromptCache:
    """Least-recently-used cache of per-prompt text conditioning (a dict of tensors per prompt string).

    Entries live on ``store_device`` (the CPU when the model runs on an accelerator, so thousands of cached T5 / Qwen
    embeddings never take GPU memory) and are moved to the model's device when a batch is assembled.
    """

    def __init__(self, max_items: int | None, store_device: torch.device):
        self.max_items = max_items
        self.store_device = store_device
        self._items: OrderedDict[str, dict[str, torch.Tensor]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, prompt: str) -> bool:
        return prompt in self._items

    def get(
        self, prompts: list[str], encode: Callable[[list[str]], list[dict[str, torch.Tensor]]]
    ) -> list[dict[str, torch.Tensor]]:
        """Entries for ``prompts`` (duplicates allowed); ``encode`` is called once with the uncached unique ones."""
        found = {p: self._items[p] for p in dict.fromkeys(prompts) if p in self._items}
        missing = [p for p in dict.fromkeys(prompts) if p not in found]
        if missing:
            for p, entry in zip(missing, encode(missing)):
                found[p] = {k: v.detach().to(self.store_device) for k, v in entry.items()}
                self._items[p] = found[p]
        for p in found:
            if p in self._items:
                self._items.move_to_end(p)
        while self.max_items is not None and len(self._items) > self.max_items:
            self._items.popitem(last=False)
        return [found[p] for p in prompts]


def check_update_path(m: Any, errors: ConfigErrors) -> None:
    """``model.activation_checkpointing`` and ``model.compile`` (docs/performance.md), before any model is built."""
    from models.activation_checkpointing import check_activation_checkpointing
    from models.compiled_blocks import compile_unavailable_reason

    check_activation_checkpointing(m, errors)
    if m.compile:
        reason = compile_unavailable_reason(resolve_device(m.device))
        errors.require(
            reason is None, "model.compile", f"true needs torch.compile's inductor: {reason}. Fix: model.compile=false"
        )


# ------------------------------------------------------------------------------------------------ the base class
class DiffusersBackbone(FrozenReference, Backbone):
    """Base of the diffusers family adapters (see module docstring).

    Subclasses set the class attributes, call :meth:`_init_common` first, load their components with
    :meth:`_load` / :meth:`_load_frozen` / :meth:`_load_transformer`, build ``self.pipe`` (a diffusers pipeline used
    only as a holder of the family's own prompt-encoding and packing helpers) and finish with :meth:`_init_training`.
    """

    #: display name and canonical hub id of the family (for messages and README)
    family: str = "diffusers"
    hub_id: str = ""
    #: the subfolders of a model folder this family loads (checked before anything is built)
    components: tuple[str, ...] = ()
    #: attribute names of the transformer's block lists, in forward order (one FSDP unit each)
    block_attrs: tuple[str, ...] = ()
    #: model.height and model.width must be multiples of this: the published VAE's spatial factor (8) x the
    #: transformer's 2 x 2 patches (or packing). The loaded checkpoint's VAE is checked again when it is built.
    image_size_multiple: int = 16
    #: true-CFG scale; families with CFG set it per instance (FLUX.1-dev's guidance is embedded, so no CFG)
    guidance_scale: float = 1.0
    guidance_attr = "guidance_scale"

    transformer: nn.Module
    pipe: Any  # a diffusers pipeline (diffusers is untyped to mypy)
    scheduler: Any  # the family's diffusers scheduler, set by each family's constructor
    negative_prompt: str  # set by the families with true CFG (read only when do_cfg)
    _latent_shape: tuple[int, ...]  # set by each family's constructor

    # -- config -------------------------------------------------------------------------------------------------
    @classmethod
    def check(cls, cfg: Any, errors: ConfigErrors) -> None:
        super().check(cfg, errors)
        m = cfg.model
        k = cls.image_size_multiple
        for key in ("height", "width"):
            value = getattr(m, key)
            errors.require(
                value > 0 and value % k == 0,
                f"model.{key}",
                f"must be a positive multiple of {k} for "
                f"{m.name} (the VAE's factor x the 2x2 patches; got {value}). Fix: "
                f"model.{key}={max(k, round(value / k) * k)}",
            )
        errors.require(
            m.max_sequence_length >= 1, "model.max_sequence_length", f"must be >= 1 (got {m.max_sequence_length})"
        )
        errors.require(
            m.dtype not in (Dtype.float64, Dtype.fp64),
            "model.dtype",
            f"{m.dtype} is not a compute dtype of the diffusers families. Fix: model.dtype=auto (bf16 on a "
            f"GPU, fp32 on the CPU)",
        )
        if m.path is not None:  # a tiny twin's null path: the twin is built into its cache
            with errors.collect():
                ComponentLoader(m.path, cls.family, cls.hub_id).check(cls.components)
        if m.finetune == Finetune.lora:
            errors.require(
                m.lora_rank >= 1, "model.lora_rank", f"must be >= 1 with model.finetune=lora (got {m.lora_rank})"
            )
        check_update_path(m, errors)

    # -- construction -------------------------------------------------------------------------------------------
    def _init_common(self, cfg: DiffusersModelConfig, components: Sequence[str]) -> None:
        """Settings every family shares (docs/memory.md): the compute device and dtype, the text-conditioning
        policy, the fine-tuning mode with its reference dtype and LoRA base sharding; then checks that every
        component exists before anything loads."""
        from models.sharded_load import sharded_startup_enabled

        self.cfg = cfg
        self.name = cfg.name
        self.path = str(cfg.path)
        self.height, self.width = cfg.height, cfg.width
        self.max_sequence_length = cfg.max_sequence_length
        self.device = resolve_device(cfg.device)
        self.dtype = torch_dtype(cfg.dtype, self.device.type)
        self.finetune = cfg.finetune
        self.text_encoders = cfg.text_encoders
        self.reference_dtype = torch_dtype(cfg.reference_dtype, self.device.type)
        self.base_sharding = cfg.base_sharding
        self.loader = ComponentLoader(self.path, self.family, self.hub_id)
        self.loader.check(components)  # every missing piece named before anything loads
        self.offload_text_encoders = self.text_encoders != TextEncoders.device and self.device.type != "cpu"
        store = torch.device("cpu") if self.device.type != "cpu" else self.device
        self._prompt_cache = PromptCache(cfg.prompt_cache_size, store)
        self._neg_cache: dict[str, dict[str, torch.Tensor]] = {}
        self._text_encoders: list[nn.Module] | None = []
        self._precomputed: PrecomputedText | None = None  # once loaded
        self._sharded_startup = sharded_startup_enabled()  # built on meta; parallelize() loads the shards
        self._materialized = not self._sharded_startup

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

        self._transformer_cls, self._transformer_subfolder = cls, subfolder
        dtype = self.dtype if self.finetune == "lora" else torch.float32
        if self._sharded_startup:
            return cast_like_from_pretrained(build_on_meta(cls, self.loader.load_config(cls, subfolder)), dtype)
        return self._load(cls, subfolder, torch_dtype=dtype)

    def _init_training(self, keep_reference: bool, text_encoders: list[nn.Module], vae: nn.Module) -> None:
        """The fine-tuning mode, then the update path (docs/performance.md): activation checkpointing of the chosen
        blocks and, with ``model.compile``, every block compiled in place, both before any sharding."""
        from models.activation_checkpointing import apply_activation_checkpointing, resolve_activation_checkpointing
        from models.compiled_blocks import compile_blocks

        self._text_encoders = list(text_encoders)
        for m in self._text_encoders:
            m.to("cpu" if self.offload_text_encoders else self.device)
        vae.to(self.device)
        self._configure_finetune(keep_reference)
        k = self.cfg.activation_checkpointing_k
        self.activation_checkpointing = resolve_activation_checkpointing(self.cfg.activation_checkpointing)
        self.checkpointed_blocks = apply_activation_checkpointing(
            self.transformer, self.transformer_blocks(), self.activation_checkpointing, k
        )
        self.compiled = bool(self.cfg.compile)
        if self.compiled:
            compile_blocks([b for m in self.transformer_modules() for b in self.transformer_blocks(m)], self.device)
        if self._materialized:
            self.transformer.to(self.device)
            if self._reference_model is not None:
                self._reference_model.to(self.device)
        self.transformer.train()

    # -- fine-tuning mode ---------------------------------------------------------------------------------------
    def _configure_finetune(self, keep_reference: bool) -> None:
        from models.sharded_load import initial_adapter_state, lora_layers

        cfg = self.cfg
        if cfg.finetune == Finetune.lora:
            from peft import LoraConfig

            self.transformer.requires_grad_(False)
            try:
                self.transformer.add_adapter(
                    LoraConfig(
                        r=cfg.lora_rank,
                        lora_alpha=cfg.lora_alpha,
                        init_lora_weights="gaussian",
                        target_modules=list(cfg.lora_targets),
                    ),
                    adapter_name=ADAPTER_NAME,
                )
            except ValueError as e:
                raise ConfigError(
                    f"model.lora_targets={list(cfg.lora_targets)} match no module of "
                    f"{type(self.transformer).__name__} ({e})"
                ) from None
            for _, layer in lora_layers(self.transformer):  # adapters and their optimizer state in fp32
                for p in layer.parameters():
                    if p.requires_grad:
                        p.data = p.data.float()
            if self._materialized:  # seeded as the sharded start-up seeds them (models/sharded_load.py)
                self._load_adapters(initial_adapter_state(self.transformer, ADAPTER_NAME, torch.initial_seed()))
        else:
            self.transformer.requires_grad_(True)
        self._keep_reference(keep_reference, self.reference_dtype)

    def _load_adapters(self, state: dict[str, torch.Tensor]) -> None:
        from models.sharded_load import load_adapters

        load_adapters(self.transformer, state)

    @property
    def latent_shape(self) -> tuple[int, ...]:
        return self._latent_shape  # set by each family's constructor

    def model_timestep(self, sigma: torch.Tensor) -> torch.Tensor:
        """What the transformer receives as its timestep for noise level ``sigma`` (the family's convention)."""
        raise NotImplementedError

    def _encode(self, prompts: list[str]) -> list[dict[str, torch.Tensor]]:
        """The text encoders' tensors of each prompt (the family's own encoding; every family defines it)."""
        raise NotImplementedError

    def sigmas(self, num_steps: int, shift: float) -> torch.Tensor:
        """The family scheduler's static-shift grid (its own config, ``shift`` replacing the config's)."""
        return static_shift_sigmas(num_steps, shift, dict(self.scheduler.config))

    def pipeline_kwargs(self) -> dict:
        """Arguments of the family's diffusers pipeline call that sample as this backbone is set up (size, text
        length, guidance): ``backbone.pipe(prompts, **backbone.pipeline_kwargs())``."""
        return dict(
            height=self.height,
            width=self.width,
            max_sequence_length=self.max_sequence_length,
            guidance_scale=self.guidance_scale,
            negative_prompt=self.negative_prompt,
        )

    @property
    def do_cfg(self) -> bool:
        """True CFG (one forward over ``[uncond, cond]``) when the family's ``guidance_scale`` exceeds 1."""
        return self.guidance_scale > 1.0

    @property
    def rows_per_sample(self) -> int:
        return 2 if self.do_cfg else 1

    def _check_ready(self) -> None:
        if not self._materialized:
            raise RuntimeError(
                f"{type(self).__name__} was built on the meta device (a process group of several "
                f"ranks): call backbone.parallelize(mesh) before using it (it loads each rank's "
                f"shards)"
            )

    # -- text conditioning --------------------------------------------------------------------------------------
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

    def _run_encoders(
        self, encode: Callable[[list[str]], list[dict[str, torch.Tensor]]], prompts: list[str]
    ) -> list[dict[str, torch.Tensor]]:
        """``encode(prompts)``, or their precomputed entries once :meth:`precompute_text` has run."""
        if self._precomputed is not None:
            return self._precomputed.lookup(prompts)
        with torch.no_grad(), self._text_encoders_ready():
            return encode(prompts)

    def _encode_cached(
        self, prompts: list[str], encode: Callable[[list[str]], list[dict[str, torch.Tensor]]]
    ) -> list[dict[str, torch.Tensor]]:
        return self._prompt_cache.get(list(prompts), lambda missing: self._run_encoders(encode, missing))

    def _negative(
        self, prompt: str, encode: Callable[[list[str]], list[dict[str, torch.Tensor]]]
    ) -> dict[str, torch.Tensor]:
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

    # -- guidance ----------------------------------------------------------------------------------------------
    def guided_velocity(
        self,
        latents: torch.Tensor,
        timestep: torch.Tensor,
        cond: dict[str, torch.Tensor],
        uncond: dict[str, torch.Tensor | None],
        renorm_dim: int | None = None,
        **shared: object,
    ) -> torch.Tensor:
        """The transformer's fp32 prediction for ``latents`` at ``timestep`` (the family's time input), with true
        classifier-free guidance when :attr:`do_cfg`: ONE forward over the rows ``[uncond, cond]`` (``uncond``: the
        negative prompt's tensors, each of batch 1, broadcast to the batch; the same keys as ``cond``) combined by
        :meth:`cfg_combine`; otherwise the conditional forward alone. ``shared``: keyword arguments of the forward
        that do not depend on the row."""
        x, t, inputs = latents, timestep, cond
        if self.do_cfg:
            b = latents.shape[0]
            inputs = {}
            for k, v in cond.items():
                u = uncond[k]
                assert u is not None  # do_cfg: encode_prompts added the negative prompt's tensors
                inputs[k] = torch.cat([u.expand(b, *u.shape[1:]), v])
            x, t = torch.cat([x, x]), torch.cat([t, t])
        with self._autocast():
            out = self._active(hidden_states=x, timestep=t, **inputs, **shared, return_dict=False)[0].float()
        if not self.do_cfg:
            return out
        v_u, v_c = out.chunk(2)
        return self.cfg_combine(v_u, v_c, self.guidance_scale, renorm_dim)

    @staticmethod
    def cfg_combine(
        v_uncond: torch.Tensor, v_cond: torch.Tensor, scale: float, renorm_dim: int | None = None
    ) -> torch.Tensor:
        """``v_u + w (v_c - v_u)``; with ``renorm_dim`` the result is rescaled to the conditional prediction's norm
        along that dim (Qwen-Image's pipeline does this per token)."""
        v = v_uncond + scale * (v_cond - v_uncond)
        if renorm_dim is not None:
            v = v * (v_cond.norm(dim=renorm_dim, keepdim=True) / v.norm(dim=renorm_dim, keepdim=True))
        return v

    def _autocast(self):
        """Autocast to the compute dtype, for the policy and the reference alike: a reference stored below it reads
        its weights in the compute dtype, sharded (FSDP2's gather) or not (models/frozen_reference.py)."""
        return torch.autocast(self.device.type, dtype=self.dtype, enabled=self.dtype != torch.float32)

    # -- sharding -----------------------------------------------------------------------------------------------
    def transformer_blocks(self, module: nn.Module | None = None) -> list[nn.Module]:
        """The transformer blocks (one FSDP unit each), in forward order."""
        from models.parallelize import transformer_blocks

        return transformer_blocks(module if module is not None else self.transformer, self.block_attrs)

    @classmethod
    def shard_transformer(cls, module: nn.Module, mesh, **kwargs) -> nn.Module:
        """FSDP2 over a transformer of this family (``kwargs``: :func:`models.parallelize.parallelize_blocks`'s):
        one unit per block of ``block_attrs``, the root last."""
        from models.parallelize import parallelize_blocks, transformer_blocks

        return parallelize_blocks(module, transformer_blocks(module, cls.block_attrs), mesh, **kwargs)

    def parallelize(self, mesh, reshard_after_forward: bool = True, mp_policy=None) -> None:
        """Shard the trainable transformer (and a full-fine-tuning reference copy) with FSDP2, torchtitan style
        (:meth:`shard_transformer`; activation checkpointing was applied at construction from
        ``model.activation_checkpointing``): ``fully_shard`` on each of the family's ``block_attrs`` blocks with a
        ``MixedPrecisionPolicy``, the root last. The reference keeps its own dtype and is gathered in the compute
        dtype; a LoRA base with ``model.base_sharding=replicate`` is left out of the shards. Text encoders and the VAE
        stay replicated and unsharded. After a sharded start-up each rank then reads its own shards from the
        checkpoint (``models/sharded_load.py``). Call on every rank, before the optimizer is built (it must see the
        sharded parameters)."""
        from torch.distributed.fsdp import MixedPrecisionPolicy

        from models.sharded_load import lora_layers

        replicated: set[nn.Parameter] = set()
        if self.finetune == Finetune.lora and self.base_sharding == BaseSharding.replicate:
            adapters = {p for _, layer in lora_layers(self.transformer) for p in layer.parameters() if p.requires_grad}
            replicated = {p for p in self.transformer.parameters() if p not in adapters}
        for module in self.transformer_modules():
            is_ref = module is self._reference_model
            policy = MixedPrecisionPolicy(param_dtype=self.dtype) if is_ref and mp_policy is None else mp_policy
            self.shard_transformer(
                module,
                mesh,
                mp_policy=policy,
                reshard_after_forward=reshard_after_forward,
                ignored_params=replicated if module is self.transformer else None,
            )
        if not self._materialized:
            self._load_shards()
        self._materialized = True
        self._after_materialize()

    def _load_shards(self) -> None:
        """Each rank reads its shards of the policy (and reference) from the transformer's safetensors files; LoRA
        adapters are drawn from rank 0's seed, as the single-process path draws them."""
        from models.sharded_load import initial_adapter_state, materialize_and_load, weights_folder
        from rewardflow.distributed import broadcast_object

        folder = weights_folder(self.path, self._transformer_subfolder, self.loader.is_local)
        for module in self.transformer_modules():
            materialize_and_load(module, folder, self.device)
        if self.finetune == "lora":
            seed = broadcast_object(torch.initial_seed())
            self._load_adapters(initial_adapter_state(self.transformer, ADAPTER_NAME, seed))

    def _after_materialize(self) -> None:
        """Hook for tensors derived from the transformer at construction (none by default)."""

    # -- export -------------------------------------------------------------------------------------------------
    def _lora_state_dict(self) -> dict[str, torch.Tensor]:
        """The adapter's weights, gathered to full tensors (a collective under FSDP: call on every rank)."""
        from peft.utils import get_peft_model_state_dict
        from torch.distributed.tensor import DTensor

        state = {}
        for k, p in self.transformer.named_parameters():
            if "lora_" in k:
                t = p.full_tensor() if isinstance(p, DTensor) else p
                state[k] = t.detach().to("cpu", torch.float32).clone()
        return get_peft_model_state_dict(self.transformer, state_dict=state, adapter_name=ADAPTER_NAME)

    def _lora_metadata(self) -> dict:
        meta = self.transformer.peft_config[ADAPTER_NAME].to_dict()
        return {k: (sorted(v) if isinstance(v, set) else v) for k, v in meta.items()}

    def _full_state_dict(self) -> dict[str, torch.Tensor]:
        """Every transformer weight as a full CPU tensor on rank 0 (a collective under FSDP)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        return get_model_state_dict(self.transformer, options=StateDictOptions(full_state_dict=True, cpu_offload=True))

    def save_pretrained(self, save_directory: str | os.PathLike) -> Path:
        """Export what diffusers / peft load: LoRA mode writes the adapter with the family pipeline's
        ``save_lora_weights`` (load it with ``pipe.load_lora_weights(dir)``); full mode writes ``transformer/``
        (``<Transformer>.from_pretrained(dir, subfolder="transformer")``). Works sharded: every rank must call it,
        rank 0 writes. ``rewardflow_export.json`` records the base model and mode."""
        out = Path(save_directory)
        rank = current_world().rank
        if self.finetune == "lora":
            state, meta = self._lora_state_dict(), self._lora_metadata()
            if rank == 0:
                out.mkdir(parents=True, exist_ok=True)
                type(self.pipe).save_lora_weights(
                    out, transformer_lora_layers=state, transformer_lora_adapter_metadata=meta
                )
        else:
            state = self._full_state_dict()
            if rank == 0:
                self._write_transformer(out / "transformer", state)
        if rank == 0:
            info = {
                "family": self.family,
                "backbone": type(self).__name__,
                "base_model": self.path,
                "finetune": self.finetune,
                "load_with": (
                    "pipe.load_lora_weights(dir)"
                    if self.finetune == "lora"
                    else f"{self._transformer_cls.__name__}.from_pretrained(dir, subfolder='transformer')"
                ),
            }
            (out / "rewardflow_export.json").write_text(json.dumps(info, indent=2) + "\n")
        return out

    def _write_transformer(self, folder: Path, state: dict[str, torch.Tensor]) -> None:
        import inspect
        import logging

        from diffusers import __version__ as diffusers_version
        from huggingface_hub import save_torch_state_dict

        # its module logs "weights saved" at INFO under its file path; the trainer logs the export itself
        logging.getLogger(inspect.getfile(save_torch_state_dict)).setLevel(logging.WARNING)
        folder.mkdir(parents=True, exist_ok=True)
        config = {k: v for k, v in dict(self.transformer.config).items() if not k.startswith("_")}
        config = {"_class_name": self._transformer_cls.__name__, "_diffusers_version": diffusers_version, **config}
        (folder / "config.json").write_text(json.dumps(_jsonable(config), indent=2, sort_keys=True) + "\n")
        save_torch_state_dict(
            {k: v.contiguous() for k, v in state.items()},
            folder,
            filename_pattern="diffusion_pytorch_model{suffix}.safetensors",
            max_shard_size="10GB",
        )


def _jsonable(value):
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_jsonable(v) for v in value]
    return value
