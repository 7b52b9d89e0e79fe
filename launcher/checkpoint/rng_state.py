"""One process's random-number-generator states (torch, CUDA, numpy, Python) in a file that
``torch.load(weights_only=True)`` reads: tensors and plain Python values only, so loading a checkpoint never
unpickles arbitrary objects (a crafted ``rank_*.pt`` cannot run code).

Files written before this format held numpy's legacy state tuple (a pickled ``ndarray``); they still load, with
exactly numpy's array-rebuilding functions allowed (torch's documented ``safe_globals`` mechanism), nothing else.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

_NUMPY_CORE: Any = getattr(np, "_core", getattr(np, "core", None))  # numpy 2 renamed numpy.core to numpy._core
#: what a pickled numpy array needs, for RNG files written by rewardflow before this format
_NUMPY_ARRAY_GLOBALS = [
    np.ndarray,
    np.dtype,
    type(np.dtype(np.uint32)),
    _NUMPY_CORE.multiarray._reconstruct,
]


def capture() -> dict[str, Any]:
    """This process's RNG states as tensors and plain values."""
    numpy_state = np.random.get_state(legacy=False)  # {"bit_generator", "state": {"key", "pos"}, ...}
    version, internal, gauss_next = random.getstate()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "bit_generator": numpy_state["bit_generator"],
            "key": torch.from_numpy(numpy_state["state"]["key"].astype(np.int64)),
            "pos": int(numpy_state["state"]["pos"]),
            "has_gauss": int(numpy_state["has_gauss"]),
            "gauss": float(numpy_state["gauss"]),
        },
        "python": {"version": version, "internal": torch.tensor(internal, dtype=torch.int64), "gauss_next": gauss_next},
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore(state: dict[str, Any]) -> None:
    """Set this process's RNG states from :func:`capture`'s dict (or a legacy file's)."""
    torch.set_rng_state(state["torch"])
    numpy_state, python_state = state["numpy"], state["python"]
    if isinstance(numpy_state, dict):
        np.random.set_state(
            {
                "bit_generator": numpy_state["bit_generator"],
                "state": {"key": numpy_state["key"].numpy().astype(np.uint32), "pos": numpy_state["pos"]},
                "has_gauss": numpy_state["has_gauss"],
                "gauss": numpy_state["gauss"],
            }
        )
        random.setstate((python_state["version"], tuple(python_state["internal"].tolist()), python_state["gauss_next"]))
    else:  # legacy: numpy's and Python's own tuples
        np.random.set_state(numpy_state)
        random.setstate(python_state)
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save(path: str | Path) -> None:
    torch.save(capture(), path)


def load(path: str | Path) -> dict[str, Any]:
    """Read an RNG file with ``weights_only=True`` (raises ``pickle.UnpicklingError`` on anything else)."""
    with torch.serialization.safe_globals(_NUMPY_ARRAY_GLOBALS):
        return torch.load(path, weights_only=True, map_location="cpu")
