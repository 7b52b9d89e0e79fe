"""A FLUX.1-architecture model folder whose transformer has no weight file: the trainer builds it at random on the
compute device instead of reading it (the GPU check's weights are random anyway, docs/gpu_check.md).

Why: ``model=tiny_flux model.path=<folder>`` runs the real trainer on any transformer config, but a folder written
the usual way (``scripts/flux_bench_models.py``) holds fp32 weights: FLUX.1-dev at published width and half its
depth is 24 GB to write and read back, more than the GPU slot's minutes allow (and its 64 GiB disk at full depth).
Here only ``transformer/config.json`` is written (the planner reads the depth from it, launcher/plan/model_sizes.py);
the text encoders, tokenizers, scheduler and VAE are the tiny twin's (models/tiny_flux.py), whose widths match the
wide config's text inputs (``WIDE_TRANSFORMER``: joint attention 32, pooled 32).
"""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path
from typing import Any, Iterator

import torch

#: the file that marks a config-only transformer (and says why there is no weight file)
MARKER = "RANDOM_WEIGHTS"


def config_only_folder(out: Path, transformer: dict[str, Any]) -> Path:
    """``out`` holding the tiny FLUX twin's components and a ``transformer/`` of ``transformer``'s config without
    weights; rewritten when the config differs."""
    from models.tiny_flux import materialize_tiny_flux

    twin = materialize_tiny_flux()
    if not (out / "model_index.json").exists():
        shutil.copytree(twin, out, ignore=shutil.ignore_patterns("transformer"), dirs_exist_ok=True)
    base = json.loads((twin / "transformer" / "config.json").read_text())
    (out / "transformer").mkdir(parents=True, exist_ok=True)
    (out / "transformer" / "config.json").write_text(json.dumps({**base, **transformer}, indent=1))
    (out / "transformer" / MARKER).write_text(
        "built at random on the device by scripts/gpu_measure/random_transformer.py\n"
    )
    return out


@contextlib.contextmanager
def random_transformers(device: torch.device, seed: int = 0) -> Iterator[None]:
    """While active, a config-only transformer folder loads as ``cls.from_config(config)`` built on ``device``
    (diffusers' default initialisation, seeded) and cast as ``from_pretrained(torch_dtype=...)`` would; every other
    component loads as usual."""
    from models.loading import ComponentLoader
    from models.sharded_load import cast_like_from_pretrained

    original = ComponentLoader.load

    def load(self, cls, subfolder: str, **kwargs):
        folder = Path(self.path).expanduser() / subfolder
        if not (folder / MARKER).is_file():
            return original(self, cls, subfolder, **kwargs)
        torch.manual_seed(seed)
        with torch.device(device):
            module = cls.from_config(cls.load_config(folder))
        return cast_like_from_pretrained(module, kwargs.get("torch_dtype") or torch.float32)

    ComponentLoader.load = load  # type: ignore[method-assign]
    try:
        yield
    finally:
        ComponentLoader.load = original  # type: ignore[method-assign]
