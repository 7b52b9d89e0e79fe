"""Config of reward=aesthetic: the LAION improved aesthetic predictor, a linear head on the L2-normalised CLIP
ViT-L/14 image embedding (sac+logos+ava1-l14-linearMSE.pth), about 1-10 (docs/rewards.md#aesthetic). Offline:
reward.path=/local/clip-vit-large-patch14 and reward.head_path=/local/folder or the .pth file (rewards/weights.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from rewardflow.dtypes import Dtype
from rewardflow.errors import ConfigErrors
from rewards.base_config import RewardConfig, check_compute_dtype
from rewards.weights import HF_WEIGHTS, require_files

#: the image processor's settings file (no tokenizer needed: only images are embedded)
HF_IMAGE_PROCESSOR = [("preprocessor_config.json", "processor_config.json")]


def check_clip_image_model(cfg: Any, errors: ConfigErrors) -> None:
    """The dtype and the files of a CLIP image encoder (rewards/clip_image.py): ``reward.path`` and
    ``reward.processor_path``, each a local folder or a hub id in the local cache when offline."""
    r, key = cfg.reward, errors.key("reward")
    check_compute_dtype(cfg, errors)
    with errors.collect():
        require_files(f"{key}.path", r.path, ["config.json", HF_WEIGHTS])
    with errors.collect():
        where = f"{key}.processor_path" if r.processor_path else f"{key}.path"
        require_files(where, r.processor_path or r.path, HF_IMAGE_PROCESSOR)


@dataclass
class AestheticRewardConfig(RewardConfig):
    """The LAION improved aesthetic predictor v2 (github.com/christophschuhmann/improved-aesthetic-predictor):
    CLIP ViT-L/14 image embedding, L2-normalised, then the MLP head of ``head_filename``."""

    _target_: str = "rewards.aesthetic.AestheticReward"
    name: str = "aesthetic"
    path: str = "openai/clip-vit-large-patch14"  # the CLIPModel whose image embedding the head reads
    processor_path: Optional[str] = None  # the image processor settings; null: those in `path`
    head_path: str = "camenduru/improved-aesthetic-predictor"  # hub id, local folder holding head_filename, or file
    head_filename: str = "sac+logos+ava1-l14-linearMSE.pth"  # torch.save'd state dict, keys layers.{0,2,4,6,7}.*
    dtype: Dtype = Dtype.auto  # of the CLIP encoder: auto = bf16 on GPU, fp32 on CPU; the head runs in fp32

    @classmethod
    def check(cls, cfg: Any, errors: ConfigErrors) -> None:
        super().check(cfg, errors)
        check_clip_image_model(cfg, errors)
        with errors.collect():
            require_files(
                f"{errors.key('reward')}.head_path", cfg.reward.head_path, [cfg.reward.head_filename], allow_file=True
            )


SCHEMAS = {"reward": {"aesthetic": AestheticRewardConfig}}
