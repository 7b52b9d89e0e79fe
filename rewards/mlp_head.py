"""The five-layer linear head of the LAION improved aesthetic predictor, which ImageReward reuses (docs/rewards.md).

Both checkpoints store it as ``nn.Sequential`` entries ``layers.{0,2,4,6,7}.{weight,bias}``: Linear (D -> 1024),
Dropout, Linear (1024 -> 128), Dropout, Linear (128 -> 64), Dropout, Linear (64 -> 16), Linear (16 -> 1), with no
activation between them (the published code has its ReLUs commented out), so at inference it is one affine map kept
in its trained factors. D is 768 in both releases (CLIP ViT-L/14's projection; BERT-base's width); the sizes are read
from the weights, so a tiny twin of another width loads through the same code.
"""

from __future__ import annotations

import torch
from torch import nn

#: indices of the Linear layers in the Sequential (the others are Dropouts, which hold no weights)
LINEAR_INDICES = (0, 2, 4, 6, 7)
DROPOUTS = {1: 0.2, 3: 0.2, 5: 0.1}


def head_keys(prefix: str = "layers.") -> list[str]:
    return [f"{prefix}{i}.{p}" for i in LINEAR_INDICES for p in ("weight", "bias")]


class MLPHead(nn.Module):
    """The head, built from the shapes of its weights: ``state`` maps ``layers.<i>.weight|bias`` to tensors."""

    def __init__(self, state: dict[str, torch.Tensor]):
        super().__init__()
        missing = [k for k in head_keys() if k not in state]
        if missing:
            raise KeyError(f"the aesthetic/ImageReward head lacks {', '.join(missing)}")
        modules: list[nn.Module] = []
        for i in range(LINEAR_INDICES[-1] + 1):
            if i in DROPOUTS:
                modules.append(nn.Dropout(DROPOUTS[i]))
                continue
            out_features, in_features = state[f"layers.{i}.weight"].shape
            modules.append(nn.Linear(in_features, out_features))
        self.layers = nn.Sequential(*modules)
        self.load_state_dict({k: state[k] for k in head_keys()})
        self.requires_grad_(False).eval()

    @property
    def in_features(self) -> int:
        return int(self.layers[0].in_features)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """(B, D) -> (B,)"""
        return self.layers(features).squeeze(-1)
