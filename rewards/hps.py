"""HPSv2.1 (Human Preference Score v2.1): open_clip ViT-H-14 with the weights of ``xswu/HPSv2``
``HPS_v2.1_compressed.pt``, the score being the cosine of the normalised image and prompt embeddings (no logit
scale), about 0.25 -> 0.33 over a Flux fine-tuning run (DanceGRPO's README).

Loaded the way the peers load it, minus their pitfalls: ``open_clip.create_model(arch, pretrained=<checkpoint>)``
with ``weights_only=True`` (or a ``.safetensors`` file); the checkpoint holds the whole CLIP under ``state_dict``, so
no separate LAION base weights are needed. The ``hpsv2`` package's ``score()`` defaults to v2.0; here the file name
is explicit. Preprocessing is HPSv2's eval transform as tensor ops: longest side to 224, pad with black (no crop),
OpenAI CLIP mean/std (:mod:`rewards.preprocess`). The tokenizer is open_clip's bundled BPE (no download).
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import torch

from rewardflow.errors import ConfigErrors
from rewards.clip_base import CLIPStyleReward
from rewards.hps_config import HPSRewardConfig
from rewards.preprocess import normalize, resize_longest_and_pad
from rewards.weights import fetch_file


def register_arch(arch: str) -> str:
    """open_clip architecture name of ``arch``: a built-in name (``ViT-H-14``) as is, or a model-config ``.json``
    file registered under its stem (how custom and test architectures go through the same ``create_model``)."""
    import open_clip

    if arch.endswith(".json"):
        path = Path(arch).expanduser()
        open_clip.add_model_config(path)
        return path.stem
    return arch


#: the keys every open_clip model config has (open_clip/model_configs/*.json), read by ``create_model``
class HPSv21Reward(CLIPStyleReward[HPSRewardConfig]):
    """HPSv2.1 reward, built from its typed config (:class:`rewards.hps_config.HPSRewardConfig`): ``cfg.path`` is a
    hub id (default ``xswu/HPSv2``), a local folder holding ``cfg.filename``, or the checkpoint file itself (``.pt``
    with a ``state_dict`` entry, or ``.safetensors``); ``cfg.arch`` an open_clip architecture (``ViT-H-14``) or a
    model-config ``.json``."""

    def __init__(self, cfg: HPSRewardConfig):
        super().__init__(cfg)
        import open_clip

        arch_name = register_arch(cfg.arch)
        checkpoint = fetch_file(cfg.path, cfg.filename)
        try:
            self.model = open_clip.create_model(
                arch_name,
                pretrained=str(checkpoint),
                weights_only=True,
                require_pretrained=True,
                precision="fp32",
                device="cpu",
            )
        except pickle.UnpicklingError as e:
            raise RuntimeError(
                f"{checkpoint} holds more than tensors, so it cannot be loaded with weights_only=True ({e}). Fix: "
                f"convert it once where you trust the file: python -c \"import torch, safetensors.torch as s; "
                f"sd = torch.load('{checkpoint}', weights_only=False)['state_dict']; "
                f"s.save_file({{k: v.contiguous() for k, v in sd.items()}}, 'HPS_v2.1.safetensors')\" and set "
                f"reward.path to the .safetensors file"
            ) from None
        self.tokenizer = open_clip.get_tokenizer(arch_name)
        size = self.model.visual.image_size
        self.image_size = int(size if isinstance(size, int) else size[0])
        self._freeze()

    @classmethod
    def check_with_code(cls, cfg: Any, errors: ConfigErrors) -> None:
        super().check_with_code(cfg, errors)
        key, arch = errors.key("reward"), cfg.reward.arch
        if not arch.endswith(".json"):  # a model-config file: HPSRewardConfig.check read it
            import open_clip

            errors.require(
                arch in open_clip.list_models(),
                "reward.arch",
                f"{arch!r} is not an open_clip "
                f"architecture. Fix: {key}.arch=ViT-H-14 (HPSv2.1), or a path to an open_clip "
                f"model-config .json",
            )

    def preprocess(self, images: torch.Tensor) -> torch.Tensor:
        return normalize(resize_longest_and_pad(images, self.image_size))

    def encode_images(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.model.encode_image(pixels)

    def encode_texts(self, prompts: list[str]) -> torch.Tensor:
        tokens = self.tokenizer(prompts).to(next(self.model.parameters()).device)
        return self.model.encode_text(tokens)
