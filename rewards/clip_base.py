"""What HPSv2.1, PickScore and CLIPScore share: a frozen image-text dual encoder whose score is the cosine of the
L2-normalised image and prompt embeddings, times a per-reward scale.

Subclasses provide the model, its tensor preprocessing and its two encoders. This class adds:

* dtype: ``auto`` runs the model in bf16 on CUDA and fp32 on CPU (bf16 is emulated and slow on CPUs). The trainer
  builds rewards on the CPU and then moves them with ``.to(device)``, so the cast happens on the first call on the
  final device. Preprocessing runs in fp32 and the score is returned in fp32.
* a text-embedding cache: a step scores ``group_size`` images per prompt and prompts repeat across steps, so each
  distinct prompt is encoded once (prompts get no gradient).
* gradients: :meth:`score` is differentiable in the images when called with grad enabled (adjoint methods), and
  costs no activation memory under ``torch.no_grad`` (GRPO). The reward's own weights are frozen.

Reward models are replicated on every rank, never sharded with the policy: they are not trained, and FSDP wraps
only the backbone's transformer.
"""

from __future__ import annotations

from typing import TypeVar

import torch
import torch.nn.functional as F
from torch import nn

from rewardflow.dtypes import torch_dtype
from rewards.base import Reward
from rewards.hf_clip_config import CLIPScoreRewardConfig, PickScoreRewardConfig
from rewards.hps_config import HPSRewardConfig

#: the configs of the CLIP-style rewards (each has the ``dtype`` this class reads)
CLIPConfigT = TypeVar("CLIPConfigT", bound=HPSRewardConfig | PickScoreRewardConfig | CLIPScoreRewardConfig)


class CLIPStyleReward(Reward[CLIPConfigT]):
    differentiable = True
    #: prompts whose embeddings are kept; the cache is emptied when it grows past this
    text_cache_size = 4096

    def __init__(self, cfg: CLIPConfigT):
        super().__init__(cfg)
        self.dtype_name = cfg.dtype
        self._text_cache: dict[str, torch.Tensor] = {}

    # -- what a subclass provides ---------------------------------------------------------------------------------
    model: nn.Module

    def preprocess(self, images: torch.Tensor) -> torch.Tensor:
        """(B, 3, H, W) fp32 in [0, 1] -> the model's normalised pixel input."""
        raise NotImplementedError

    def encode_images(self, pixels: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def encode_texts(self, prompts: list[str]) -> torch.Tensor:
        raise NotImplementedError

    def cosine_scale(self) -> torch.Tensor | float:
        """Multiplier of the cosine similarity (1 for HPSv2.1, logit_scale / divide_by for PickScore and CLIP)."""
        return 1.0

    # -- shared ---------------------------------------------------------------------------------------------------
    def _freeze(self) -> None:
        self.model.requires_grad_(False).eval()

    def _match_device_dtype(self) -> torch.dtype:
        param = next(self.model.parameters())
        target = torch_dtype(self.dtype_name, param.device.type)
        if param.dtype != target:
            self.model.to(target)
            self._text_cache.clear()
        return target

    @torch.no_grad()
    def text_features(self, prompts: list[str]) -> torch.Tensor:
        """L2-normalised fp32 prompt embeddings (len(prompts), D), encoded once per distinct prompt."""
        missing = list(dict.fromkeys(p for p in prompts if p not in self._text_cache))
        if missing:
            if len(self._text_cache) + len(missing) > self.text_cache_size:
                self._text_cache.clear()
            feats = F.normalize(self.encode_texts(missing).float(), dim=-1)
            self._text_cache.update(zip(missing, feats))
        device = next(self.model.parameters()).device
        return torch.stack([self._text_cache[p] for p in prompts]).to(device)

    def score(self, images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        dtype = self._match_device_dtype()
        device = next(self.model.parameters()).device
        pixels = self.preprocess(images.to(device=device, dtype=torch.float32)).to(dtype)
        image_feats = F.normalize(self.encode_images(pixels).float(), dim=-1)
        cosine = (image_feats * self.text_features(prompts)).sum(-1)
        return cosine * self.cosine_scale()
