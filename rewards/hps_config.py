"""Config of reward=hps: HPSv2.1, open_clip ViT-H-14 + xswu/HPSv2 HPS_v2.1_compressed.pt; the score is the
image-prompt cosine (~0.25-0.33). Offline: reward.path=/local/folder (holding the checkpoint) or the .pt /
.safetensors file itself (see rewards/weights.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rewardflow.dtypes import Dtype
from rewardflow.errors import ConfigErrors
from rewards.base_config import RewardConfig, check_compute_dtype
from rewards.weights import require_files

#: the entries an open_clip model-config .json must have (open_clip's model_configs/*.json)
ARCH_KEYS = ("embed_dim", "vision_cfg", "text_cfg")


def arch_config_problem(path: Path) -> str | None:
    """Why the open_clip model-config file ``path`` cannot be used (None when it can): read at validation, so a
    typo in the JSON is a message naming ``reward.arch`` rather than a traceback from open_clip."""
    if not path.is_file():
        return "no such open_clip model config" if not path.exists() else "is not a file"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        return f"cannot be read ({e.strerror})"
    except UnicodeDecodeError:
        return "is not UTF-8 text"
    except json.JSONDecodeError as e:
        return f"is not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})"
    if not isinstance(config, dict):
        return "holds no JSON object"
    missing = [k for k in ARCH_KEYS if k not in config]
    return f"is no open_clip model config: it lacks {', '.join(missing)}" if missing else None


@dataclass
class HPSRewardConfig(RewardConfig):
    _target_: str = "rewards.hps.HPSv21Reward"
    name: str = "hps"
    path: str = "xswu/HPSv2"  # hub id, local folder holding `filename`, or the .pt/.safetensors file
    filename: str = "HPS_v2.1_compressed.pt"  # HPS_v2_compressed.pt is v2.0 (the hpsv2 package's default)
    arch: str = "ViT-H-14"  # open_clip architecture, or an open_clip model-config .json
    dtype: Dtype = Dtype.auto  # auto: bf16 on GPU, fp32 on CPU

    @classmethod
    def check(cls, cfg: Any, errors: ConfigErrors) -> None:
        """The dtype, the checkpoint file and a model-config ``reward.arch``; an architecture's name needs open_clip
        (rewards/hps.py)."""
        super().check(cfg, errors)
        key, arch = errors.key("reward"), cfg.reward.arch
        check_compute_dtype(cfg, errors)
        with errors.collect():
            require_files(f"{key}.path", cfg.reward.path, [cfg.reward.filename], allow_file=True)
        if arch.endswith(".json"):
            problem = arch_config_problem(Path(arch).expanduser())
            errors.require(
                problem is None,
                "reward.arch",
                f"{arch!r}: {problem}. Fix: {key}.arch=ViT-H-14 (HPSv2.1), or a path to an open_clip model-config "
                f".json (an object with {', '.join(ARCH_KEYS)}, as open_clip's model_configs/*.json)",
            )


SCHEMAS = {"reward": {"hps": HPSRewardConfig}}
