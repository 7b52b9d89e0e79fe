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
from typing import Callable, Iterator, Sequence

import torch
from torch import nn

from launcher.errors import ConfigError
from models.backbone import Backbone
from models.frozen_reference import FrozenReference

log = logging.getLogger(__name__)

FINETUNE_MODES = ("full", "lora")
TEXT_ENCODER_MODES = ("offload", "device", "precompute")
BASE_SHARDINGS = ("shard", "replicate")
ADAPTER_NAME = "default"   # peft's adapter name for the trained LoRA


# ------------------------------------------------------------------------------------------------ device and dtype
def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """Compute dtype: bf16 on GPU, fp32 on CPU (bf16 is emulated and 1.5-6x slower there,
    docs/development.md#bf16-on-the-cpu)."""
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return DTYPES[dtype]


DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
          "float16": torch.float16, "fp16": torch.float16}


def _choice(key: str, value: str, options) -> str:
    if value not in options:
        raise ConfigError(f"{key} must be one of {', '.join(options)} (got {value!r})")
    return value


def dist_rank_world() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


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
    return (not path.startswith(("/", ".", "~")) and path.count("/") == 1 and not path.endswith("/")
            and not os.path.exists(path))


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
        return (f"Fix: download it once with network access, `hf download {repo} --local-dir {local}` "
                f"(`huggingface-cli download ...` on older huggingface_hub), then set model.path={local}; or run "
                f"once without HF_HUB_OFFLINE=1 so it lands in the HF cache "
                f"(HF_HOME={os.environ.get('HF_HOME', '~/.cache/huggingface')}).")

    def missing(self, subfolders: Sequence[str]) -> list[str]:
        """Components that are certainly not available (local folder: absent; hub id: not cached while offline)."""
        path = os.path.expanduser(self.path)
        if self.is_local:
            return [s for s in subfolders if not os.path.isfile(os.path.join(path, s, _marker(s)))]
        if not looks_like_hub_id(self.path):
            return list(subfolders)                        # a folder that does not exist
        if not _offline():
            return []                                      # from_pretrained may download; failures are wrapped
        from huggingface_hub import try_to_load_from_cache

        return [s for s in subfolders if not isinstance(try_to_load_from_cache(self.path, f"{s}/{_marker(s)}"), str)]

    def check(self, subfolders: Sequence[str]) -> None:
        """Fail before anything is built if a component is missing."""
        missing = self.missing(subfolders)
        if not missing:
            return
        if not self.is_local and not looks_like_hub_id(self.path):
            raise ModelLoadError(f"model.path={self.path!r} is neither an existing folder nor a hub id "
                                 f"(org/name) of a {self.family} checkpoint. {self.fetch_hint()}")
        where = "in the folder" if self.is_local else "in the local Hugging Face cache (HF_HUB_OFFLINE=1)"
        raise ModelLoadError(f"model.path={self.path!r}: {self.family} component(s) {', '.join(missing)} not found "
                             f"{where} (expected {', '.join(f'{m}/{_marker(m)}' for m in missing)}). "
                             f"{self.fetch_hint()}")

    def load(self, cls, subfolder: str, **kwargs):
        """``cls.from_pretrained(path, subfolder=...)`` with any loading failure turned into :class:`ModelLoadError`."""
        try:
            return cls.from_pretrained(os.path.expanduser(self.path), subfolder=subfolder, **kwargs)
        except (OSError, ValueError, EnvironmentError) as e:
            reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ModelLoadError(f"model.path={self.path!r}: cannot load the {self.family} component '{subfolder}' "
                                 f"({cls.__name__}): {reason}. {self.fetch_hint()}") from e

    def load_config(self, cls, subfolder: str) -> dict:
        try:
            return cls.load_config(os.path.expanduser(self.path), subfolder=subfolder)
        except (OSError, ValueError, EnvironmentError) as e:
            raise ModelLoadError(f"model.path={self.path!r}: cannot read the {self.family} '{subfolder}' config: "
                                 f"{e}. {self.fetch_hint()}") from e


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

    def get(self, prompts: list[str], encode: Callable[[list[str]], list[dict[str, torch.Tensor]]]
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
    #: attribute names of the transformer's block lists (one FSDP unit each) and the family's parallelize function
    block_attrs: tuple[str, ...] = ()
    parallelize_key: str = ""
    #: true-CFG scale; families with CFG set it per instance (FLUX.1-dev's guidance is embedded, so no CFG)
    guidance_scale: float = 1.0

    transformer: nn.Module
    pipe: object

    # -- construction -------------------------------------------------------------------------------------------
    def _init_common(self, path: str, name: str | None, device: str, dtype: str, components: Sequence[str],
                     prompt_cache_size: int | None, text_encoders: str, finetune: str, reference_dtype: str,
                     base_sharding: str) -> None:
        """Settings every family shares (docs/memory.md): the compute device and dtype, the text-conditioning
        policy, the fine-tuning mode with its reference dtype and LoRA base sharding; then checks that every
        component exists before anything loads."""
        from models.sharded_load import sharded_startup_enabled

        self.name = name or self.name
        self.path = str(path)
        self.device = resolve_device(device)
        self.dtype = resolve_dtype(dtype, self.device)
        self.text_encoders = _choice("model.text_encoders", text_encoders, TEXT_ENCODER_MODES)
        self.finetune = _choice("model.finetune", finetune, FINETUNE_MODES)
        self.reference_dtype = DTYPES[_choice("model.reference_dtype", reference_dtype, tuple(DTYPES))]
        self.base_sharding = _choice("model.base_sharding", base_sharding, BASE_SHARDINGS)
        self.loader = ComponentLoader(self.path, self.family, self.hub_id)
        self.loader.check(components)                         # every missing piece named before anything loads
        self.offload_text_encoders = self.text_encoders != "device" and self.device.type != "cpu"
        store = torch.device("cpu") if self.device.type != "cpu" else self.device
        self._prompt_cache = PromptCache(prompt_cache_size, store)
        self._neg_cache: dict[str, dict[str, torch.Tensor]] = {}
        self._text_encoders: list[nn.Module] | None = []
        self._precomputed = None                              # models.text_cache.PrecomputedText, once loaded
        self._sharded_startup = sharded_startup_enabled()     # built on meta; parallelize() loads the shards
        self._materialized = not self._sharded_startup

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

    def _init_training(self, lora_rank: int, lora_alpha: float, lora_targets: Sequence[str],
                       keep_reference: bool, gradient_checkpointing: bool, text_encoders: list[nn.Module],
                       vae: nn.Module) -> None:
        self._text_encoders = list(text_encoders)
        for m in self._text_encoders:
            m.to("cpu" if self.offload_text_encoders else self.device)
        vae.to(self.device)
        self._configure_finetune(self.finetune, lora_rank, lora_alpha, lora_targets, keep_reference)
        self.gradient_checkpointing = bool(gradient_checkpointing)
        if gradient_checkpointing:
            self.transformer.enable_gradient_checkpointing()
        if self._materialized:
            self.transformer.to(self.device)
            if self._reference_model is not None:
                self._reference_model.to(self.device)
        self.transformer.train()

    # -- fine-tuning mode ---------------------------------------------------------------------------------------
    def _configure_finetune(self, finetune, rank, alpha, targets, keep_reference) -> None:
        from models.sharded_load import initial_adapter_state, lora_layers

        if finetune == "lora":
            from peft import LoraConfig

            self.transformer.requires_grad_(False)
            try:
                self.transformer.add_adapter(LoraConfig(r=rank, lora_alpha=alpha, init_lora_weights="gaussian",
                                                        target_modules=list(targets)), adapter_name=ADAPTER_NAME)
            except ValueError as e:
                raise ConfigError(f"model.lora_targets={list(targets)} match no module of "
                                  f"{type(self.transformer).__name__} ({e})") from None
            for _, layer in lora_layers(self.transformer):     # adapters and their optimizer state in fp32
                for p in layer.parameters():
                    if p.requires_grad:
                        p.data = p.data.float()
            if self._materialized:   # seeded as the sharded start-up seeds them (models/sharded_load.py)
                self._load_adapters(initial_adapter_state(self.transformer, ADAPTER_NAME, torch.initial_seed()))
        else:
            self.transformer.requires_grad_(True)
        self._keep_reference(keep_reference, self.reference_dtype)

    def _load_adapters(self, state: dict[str, torch.Tensor]) -> None:
        from models.sharded_load import load_adapters

        load_adapters(self.transformer, state)

    @property
    def latent_shape(self) -> tuple[int, ...]:
        return self._latent_shape          # set by each family's constructor

    @property
    def do_cfg(self) -> bool:
        """True CFG (one forward over ``[uncond, cond]``) when the family's ``guidance_scale`` exceeds 1."""
        return self.guidance_scale > 1.0

    @property
    def rows_per_sample(self) -> int:
        return 2 if self.do_cfg else 1

    def _check_ready(self) -> None:
        if not self._materialized:
            raise RuntimeError(f"{type(self).__name__} was built on the meta device (a process group of several "
                               f"ranks): call backbone.parallelize(mesh) before using it (it loads each rank's "
                               f"shards)")

    # -- text conditioning --------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _text_encoders_ready(self) -> Iterator[None]:
        """Text encoders on the model's device for the duration of one encoding call (offload: back to the CPU
        afterwards, and the accelerator's cache emptied)."""
        if self._text_encoders is None:
            raise RuntimeError("the text encoders were released (release_text_encoders()); only cached prompts can "
                               "be encoded")
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

    def _run_encoders(self, encode: Callable[[list[str]], list[dict[str, torch.Tensor]]], prompts: list[str]
                      ) -> list[dict[str, torch.Tensor]]:
        """``encode(prompts)``, or their precomputed entries once :meth:`precompute_text` has run."""
        if self._precomputed is not None:
            return self._precomputed.lookup(prompts)
        with torch.no_grad(), self._text_encoders_ready():
            return encode(prompts)

    def _encode_cached(self, prompts: list[str], encode: Callable[[list[str]], list[dict[str, torch.Tensor]]]
                       ) -> list[dict[str, torch.Tensor]]:
        return self._prompt_cache.get(list(prompts), lambda missing: self._run_encoders(encode, missing))

    def _negative(self, prompt: str, encode: Callable[[list[str]], list[dict[str, torch.Tensor]]]
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
        from launcher.distributed import current_world
        from models.text_cache import build_or_load, cache_key, text_encoder_fingerprint
        from models.twins import default_cache_dir

        wanted = list(prompts) + ([self.negative_prompt] if self.do_cfg else [])
        encoders = ["text_encoder", "text_encoder_2", "text_encoder_3"]
        model = {"family": self.family, "path": self.path,
                 "text_encoders": (text_encoder_fingerprint(Path(os.path.expanduser(self.path)), encoders)
                                   if self.loader.is_local else None)}
        settings = {"max_sequence_length": getattr(self, "max_sequence_length", None), "dtype": str(self.dtype),
                    "backbone": type(self).__name__}
        root = Path(cache_dir) if cache_dir else default_cache_dir() / "text"
        key = f"{self.name}-{cache_key(model, settings, wanted)}"
        store, reused = build_or_load(root, key, wanted, lambda batch: self._run_encoders(self._encode, batch),
                                      current_world())
        self._precomputed = store
        self.release_text_encoders()
        log.info("text conditioning of %d prompts %s %s; text encoders freed", len(store),
                 "read from" if reused else "precomputed into", store.folder)
        return reused

    # -- guidance ----------------------------------------------------------------------------------------------
    @staticmethod
    def cfg_combine(v_uncond: torch.Tensor, v_cond: torch.Tensor, scale: float,
                    renorm_dim: int | None = None) -> torch.Tensor:
        """``v_u + w (v_c - v_u)``; with ``renorm_dim`` the result is rescaled to the conditional prediction's norm
        along that dim (Qwen-Image's pipeline does this per token)."""
        v = v_uncond + scale * (v_cond - v_uncond)
        if renorm_dim is not None:
            v = v * (v_cond.norm(dim=renorm_dim, keepdim=True) / v.norm(dim=renorm_dim, keepdim=True))
        return v

    def _autocast(self):
        """Autocast to the compute dtype. An unsharded reference stored below it (a bf16 reference in a
        single-process fp32 run) computes in its own dtype; sharded, FSDP casts its gathered weights instead."""
        from models.parallelize import is_sharded

        dtype, ref = self.dtype, self._reference_model
        if self._active is ref and ref is not None and not is_sharded(ref) and self.reference_dtype != self.dtype:
            dtype = self.reference_dtype
        return torch.autocast(self.device.type, dtype=dtype, enabled=dtype != torch.float32)

    # -- sharding -----------------------------------------------------------------------------------------------
    def transformer_blocks(self, module: nn.Module | None = None) -> list[nn.Module]:
        """The transformer blocks (one FSDP unit each), in forward order."""
        module = module if module is not None else self.transformer
        return [b for attr in self.block_attrs for b in getattr(module, attr)]

    def parallelize(self, mesh, activation_checkpointing: bool | None = None, reshard_after_forward: bool = True,
                    mp_policy=None) -> None:
        """Shard the trainable transformer (and a full-fine-tuning reference copy) with FSDP2, torchtitan style, through
        the family's ``parallelize_<family>`` (activation checkpointing, then ``fully_shard`` per block with a
        ``MixedPrecisionPolicy``, the root last). The reference keeps its own dtype and is gathered in the compute
        dtype; a LoRA base with ``model.base_sharding=replicate`` is left out of the shards. Text encoders and the
        VAE stay replicated and unsharded. After a sharded start-up each rank then reads its own shards from the
        checkpoint (``models/sharded_load.py``). Call on every rank, before the optimizer is built (it must see the
        sharded parameters)."""
        from torch.distributed.fsdp import MixedPrecisionPolicy

        from models.parallelize import PARALLELIZE
        from models.sharded_load import lora_layers

        fn = PARALLELIZE[self.parallelize_key]
        ac = self.gradient_checkpointing if activation_checkpointing is None else activation_checkpointing
        replicated: set[nn.Parameter] = set()
        if self.finetune == "lora" and self.base_sharding == "replicate":
            adapters = {p for _, layer in lora_layers(self.transformer) for p in layer.parameters() if p.requires_grad}
            replicated = {p for p in self.transformer.parameters() if p not in adapters}
        for module in self.transformer_modules():
            is_ref = module is self._reference_model
            policy = MixedPrecisionPolicy(param_dtype=self.dtype) if is_ref and mp_policy is None else mp_policy
            fn(module, mesh, mp_policy=policy, reshard_after_forward=reshard_after_forward,
               activation_checkpointing=ac and module is self.transformer,
               ignored_params=replicated if module is self.transformer else None)
        if not self._materialized:
            self._load_shards()
        self._materialized = True
        self._after_materialize()

    def _load_shards(self) -> None:
        """Each rank reads its shards of the policy (and reference) from the transformer's safetensors files; LoRA
        adapters are drawn from rank 0's seed, as the single-process path draws them."""
        from launcher.distributed import broadcast_object
        from models.sharded_load import initial_adapter_state, materialize_and_load, weights_folder

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
        rank, _ = dist_rank_world()
        if self.finetune == "lora":
            state, meta = self._lora_state_dict(), self._lora_metadata()
            if rank == 0:
                out.mkdir(parents=True, exist_ok=True)
                type(self.pipe).save_lora_weights(out, transformer_lora_layers=state,
                                                  transformer_lora_adapter_metadata=meta)
        else:
            state = self._full_state_dict()
            if rank == 0:
                self._write_transformer(out / "transformer", state)
        if rank == 0:
            info = {"family": self.family, "backbone": type(self).__name__, "base_model": self.path,
                    "finetune": self.finetune,
                    "load_with": ("pipe.load_lora_weights(dir)" if self.finetune == "lora" else
                                  f"{self._transformer_cls.__name__}.from_pretrained(dir, subfolder='transformer')")}
            (out / "rewardflow_export.json").write_text(json.dumps(info, indent=2) + "\n")
        return out

    def _write_transformer(self, folder: Path, state: dict[str, torch.Tensor]) -> None:
        from diffusers import __version__ as diffusers_version
        import inspect
        import logging

        from huggingface_hub import save_torch_state_dict

        # its module logs "weights saved" at INFO under its file path; the trainer logs the export itself
        logging.getLogger(inspect.getfile(save_torch_state_dict)).setLevel(logging.WARNING)
        folder.mkdir(parents=True, exist_ok=True)
        config = {k: v for k, v in dict(self.transformer.config).items() if not k.startswith("_")}
        config = {"_class_name": self._transformer_cls.__name__, "_diffusers_version": diffusers_version, **config}
        (folder / "config.json").write_text(json.dumps(_jsonable(config), indent=2, sort_keys=True) + "\n")
        save_torch_state_dict({k: v.contiguous() for k, v in state.items()}, folder,
                              filename_pattern="diffusion_pytorch_model{suffix}.safetensors", max_shard_size="10GB")


def _jsonable(value):
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_jsonable(v) for v in value]
    return value
