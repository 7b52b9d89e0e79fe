"""Exporting what a diffusers backbone trained, in the formats diffusers and peft load.

Owns: :class:`ExportMixin`: the LoRA adapter's state dict and metadata, the full transformer's state dict (both
gathered to full tensors under FSDP: collectives, so every rank calls them), and ``save_pretrained``, which writes
the adapter with the family pipeline's ``save_lora_weights`` or a ``transformer/`` folder, plus
``rewardflow_export.json``. The file layout is a public format: anything written here must stay loadable as before.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from models.finetune import ADAPTER_NAME
from rewardflow.distributed import current_world


class ExportMixin:
    # set by DiffusersBackbone._init_common, the family's constructor and LoadingMixin._load_transformer
    family: str
    path: str
    hub_id: str
    finetune: str
    transformer: nn.Module
    pipe: Any
    _transformer_cls: Any

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
                **self._base_model_reference(),
                "finetune": self.finetune,
                "load_with": (
                    "pipe.load_lora_weights(dir)"
                    if self.finetune == "lora"
                    else f"{self._transformer_cls.__name__}.from_pretrained(dir, subfolder='transformer')"
                ),
            }
            (out / "rewardflow_export.json").write_text(json.dumps(info, indent=2) + "\n")
        return out

    def load_export(self, folder: str | os.PathLike) -> dict:
        """Load what :meth:`save_pretrained` wrote into this backbone, before it is sharded: the adapter into its own
        LoRA adapter (``model.finetune=lora``) or the ``transformer/`` weights into the transformer; return the
        export's ``rewardflow_export.json``. The weights are copied as they are, so this backbone then computes what
        the exporting one did (``rewardflow-eval``, docs/evaluation.md#evaluating-without-training)."""
        from rewardflow.errors import ConfigError

        folder = Path(folder)
        info = json.loads((folder / "rewardflow_export.json").read_text())
        mode = info.get("finetune")
        if mode != self.finetune:
            raise ConfigError(
                f"evaluate.weights={folder}: this export holds {'a LoRA adapter' if mode == 'lora' else 'a full transformer'}"
                f" (finetune={mode}) and model.finetune={self.finetune}. Fix: model.finetune={mode}"
            )
        if mode == "lora":
            from peft.utils import set_peft_model_state_dict
            from safetensors.torch import load_file

            state = load_file(str(folder / "pytorch_lora_weights.safetensors"))
            state = {k.removeprefix("transformer."): v for k, v in state.items()}
            result = set_peft_model_state_dict(self.transformer, state, adapter_name=ADAPTER_NAME)
            unexpected = [k for k in getattr(result, "unexpected_keys", []) if "lora_" in k]
            if unexpected:
                raise ConfigError(
                    f"evaluate.weights={folder}: its adapter does not fit model= as configured (e.g. {unexpected[0]}). "
                    f"Fix: the model, model.lora_targets and model.lora_rank of the run that exported it"
                )
        else:
            from safetensors.torch import load_file

            state = {}
            for file in sorted((folder / "transformer").glob("*.safetensors")):
                state.update(load_file(str(file)))
            try:
                self.transformer.load_state_dict(state, strict=True)
            except RuntimeError as e:
                raise ConfigError(
                    f"evaluate.weights={folder}: its transformer does not fit model= as configured "
                    f"({str(e).splitlines()[0]}). Fix: the model the run that exported it trained"
                ) from None
        return info

    def _base_model_reference(self) -> dict[str, str]:
        """What the export was fine-tuned from, in terms that hold on another machine: the hub id, or the family's
        published model and the local folder's name, or the tiny twin's recipe; never an absolute path of the
        machine that wrote it."""
        from models.loading import looks_like_hub_id

        if looks_like_hub_id(self.path):
            return {"base_model": self.path}
        twin = getattr(self, "twin_recipe", None)
        if twin:
            return {"base_model": twin}
        return {"base_model": self.hub_id or "a local folder", "base_model_folder": Path(self.path).name}

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
    """A transformer config as JSON: tuples and sets become lists, as diffusers writes them."""
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_jsonable(v) for v in value]
    return value
