"""The base of every diffusers-based family adapter, composed of one mixin per concern (diffusers' loader-mixin
manner):

- ``models/loading.py``: the device policy; loading from a hub id or folder, with one clear error when a component
  is missing offline;
- ``models/finetune.py``: LoRA (peft) or full fine-tuning, with the frozen reference (``models/frozen_reference.py``);
- ``models/text_encoding.py``: the text encoders and their offload, the per-prompt embedding cache,
  ``precompute_text``;
- ``models/guidance.py``: classifier-free guidance in one batched forward, the compute-dtype autocast;
- ``models/sharding.py``: FSDP2, what is sharded and the sharded start-up's shard load (how a module is sharded:
  ``models/parallelize.py``, torchtitan style);
- ``models/export.py``: the LoRA / full state dicts and ``save_pretrained``.

This module keeps what ties them together: the family's declarations (class attributes), the config check, and
construction (``_init_common`` first, ``_init_training`` last). A family adapter (``models/flux.py``,
``models/sd3.py``, ``models/qwenimage.py``, ``models/wan.py``) subclasses :class:`DiffusersBackbone`, loads its
components through :meth:`~models.loading.LoadingMixin._load`, and implements prompt encoding, the latent layout,
the transformer call (timestep scale, packing) and decoding.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import nn

from models.backbone import Backbone
from models.common_config import DiffusersModelConfig
from models.export import ExportMixin
from models.finetune import FinetuneMixin
from models.guidance import GuidanceMixin
from models.loading import ComponentLoader, LoadingMixin, resolve_device
from models.sharding import ShardingMixin
from models.sigma_grids import static_shift_sigmas
from models.text_encoding import TextEncodingMixin
from rewardflow.dtypes import torch_dtype
from rewardflow.errors import ConfigErrors


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


# FinetuneMixin precedes ShardingMixin so that FrozenReference's transformer_modules overrides Backbone's; every
# mixin precedes Backbone, whose optional capabilities (parallelize, save_pretrained, rows_per_sample) they implement.
class DiffusersBackbone(
    LoadingMixin, FinetuneMixin, TextEncodingMixin, GuidanceMixin, ShardingMixin, ExportMixin, Backbone
):
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

    transformer: nn.Module
    pipe: Any  # a diffusers pipeline (diffusers is untyped to mypy)
    scheduler: Any  # the family's diffusers scheduler, set by each family's constructor
    negative_prompt: str  # set by the families with true CFG (read only when do_cfg)
    _latent_shape: tuple[int, ...]  # set by each family's constructor

    # -- config -------------------------------------------------------------------------------------------------
    @classmethod
    def check_with_code(cls, cfg: Any, errors: ConfigErrors) -> None:
        super().check_with_code(cfg, errors)
        m = cfg.model
        if m.path is not None:  # a tiny twin's null path: the twin is built into its cache
            with errors.collect():
                ComponentLoader(m.path, cls.family, cls.hub_id).check(cls.components)
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
        self._init_text_encoding(cfg)
        self._sharded_startup = sharded_startup_enabled()  # built on meta; parallelize() loads the shards
        self._materialized = not self._sharded_startup

    def _init_training(self, keep_reference: bool, text_encoders: list[nn.Module], vae: nn.Module) -> None:
        """The fine-tuning mode, then the update path (docs/performance.md): activation checkpointing of the chosen
        blocks and, with ``model.compile``, every block compiled in place, both before any sharding."""
        from models.activation_checkpointing import apply_activation_checkpointing, resolve_activation_checkpointing
        from models.compiled_blocks import compile_blocks

        self._place_text_encoders(text_encoders)
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

    def _check_ready(self) -> None:
        if not self._materialized:
            raise RuntimeError(
                f"{type(self).__name__} was built on the meta device (a process group of several "
                f"ranks): call backbone.parallelize(mesh) before using it (it loads each rank's "
                f"shards)"
            )

    # -- what each family defines -------------------------------------------------------------------------------
    @property
    def latent_shape(self) -> tuple[int, ...]:
        return self._latent_shape  # set by each family's constructor

    def model_timestep(self, sigma: torch.Tensor) -> torch.Tensor:
        """What the transformer receives as its timestep for noise level ``sigma`` (the family's convention)."""
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
