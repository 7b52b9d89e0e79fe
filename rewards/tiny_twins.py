"""Tiny random twins of the preference rewards, saved in the real checkpoint formats, for CPU runs and tests.

Each twin is the same class as the real model at toy width, written the way the real weights are distributed and
loaded back through the production path by pointing ``reward.path`` at it:

* ``hps/``: an open_clip ``CLIP`` from a registered model config (``tiny_open_clip.json``) with its weights in
  ``HPS_v2.1_compressed.pt`` as ``{"state_dict": ...}`` (the HPSv2 release format) and, for the safetensors path,
  ``HPS_v2.1.safetensors``;
* ``pickscore/model`` + ``pickscore/processor``: a ``CLIPModel`` (``save_pretrained``: config.json +
  model.safetensors) and, in a separate folder as with PickScore_v1 and its LAION processor, the processor files as
  the released repos ship them (``preprocessor_config.json`` with int sizes + tokenizer files);
* ``clip/``: a ``CLIPModel`` and its processor in one folder, in transformers 5's ``save_pretrained`` layout;
  the aesthetic and diversity twins read their image embeddings from it;
* ``imagereward/``: ImageReward.pt + med_config.json + ``tokenizer/`` in the release's format
  (rewards/tiny_imagereward.py);
* ``aesthetic/``: the LAION aesthetic head on its 32-dim embedding, ``sac+logos+ava1-l14-linearMSE.pth`` as the
  release (a ``torch.save``'d state dict, keys ``layers.{0,2,4,6,7}.*``);

All score at 224 px (patch 32, so 7 x 7 tokens), so the real resize/pad/crop geometry runs. Scores are random:
the twins test plumbing, shapes and gradients, not preferences. ``python -m rewards.tiny_twins`` prints the
overrides that select them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import torch

OPEN_CLIP_ARCH = "rewardflow-tiny-ViT"
OPEN_CLIP_CFG = {
    "embed_dim": 32,
    "vision_cfg": {"image_size": 224, "layers": 2, "width": 32, "head_width": 16, "patch_size": 32},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 2},
}
HF_VISION = dict(
    image_size=224, patch_size=32, hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4
)
HF_TEXT = dict(
    hidden_size=32,
    intermediate_size=37,
    num_hidden_layers=2,
    num_attention_heads=4,
    max_position_embeddings=77,
    bos_token_id=0,
    eos_token_id=1,
    pad_token_id=1,
)
HF_PROJECTION = 32
VERSION = 4


def build_tiny_hps(folder: Path, seed: int = 0) -> None:
    import open_clip
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    cfg_path = folder / f"{OPEN_CLIP_ARCH}.json"
    cfg_path.write_text(json.dumps(OPEN_CLIP_CFG, indent=2))
    open_clip.add_model_config(cfg_path)
    with torch.random.fork_rng(devices=[]):  # leave the caller's RNG alone
        torch.manual_seed(seed)
        model = open_clip.create_model(OPEN_CLIP_ARCH)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    torch.save({"state_dict": state}, folder / "HPS_v2.1_compressed.pt")
    save_file(state, folder / "HPS_v2.1.safetensors")


# preprocessor_config.json as the released CLIP repos still ship it (transformers 4 era: int sizes)
LEGACY_PREPROCESSOR = {
    "crop_size": 224,
    "do_center_crop": True,
    "do_normalize": True,
    "do_resize": True,
    "feature_extractor_type": "CLIPFeatureExtractor",
    "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711],
    "resample": 3,
    "size": 224,
}


def build_tiny_hf_clip(model_dir: Path, processor_dir: Path, seed: int = 0, legacy_processor: bool = False) -> None:
    """A tiny ``CLIPModel`` (``save_pretrained``) and its processor: the released repos' layout
    (``preprocessor_config.json`` + tokenizer files) if ``legacy_processor``, else transformers 5's
    ``CLIPProcessor.save_pretrained`` layout (``processor_config.json``)."""
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor

    from models.tiny_tokenizers import make_clip_tokenizer
    from models.twins import save_on_any_rank

    tok = make_clip_tokenizer()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = CLIPModel(
            CLIPConfig(
                text_config=dict(vocab_size=len(tok), **HF_TEXT), vision_config=HF_VISION, projection_dim=HF_PROJECTION
            )
        ).eval()
    save_on_any_rank(model).save_pretrained(model_dir)
    if legacy_processor:
        processor_dir.mkdir(parents=True, exist_ok=True)
        (processor_dir / "preprocessor_config.json").write_text(json.dumps(LEGACY_PREPROCESSOR, indent=2))
        tok.save_pretrained(processor_dir)
    else:
        image_processor = CLIPImageProcessor(size={"shortest_edge": 224}, crop_size={"height": 224, "width": 224})
        CLIPProcessor(image_processor=image_processor, tokenizer=tok).save_pretrained(processor_dir)


def build_tiny_aesthetic_head(folder: Path, in_features: int, seed: int = 0) -> None:
    """The aesthetic MLP head (rewards/mlp_head.py) on ``in_features``-dim embeddings, saved as the release is."""
    from torch import nn

    folder.mkdir(parents=True, exist_ok=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        sizes = [in_features, 1024, 128, 64, 16, 1]
        linears = [nn.Linear(a, b) for a, b in zip(sizes, sizes[1:])]
    layers = dict(zip((0, 2, 4, 6, 7), linears))
    state = {f"layers.{i}.{k}": v.detach().contiguous() for i, m in layers.items() for k, v in m.state_dict().items()}
    torch.save(state, folder / AESTHETIC_HEAD)


AESTHETIC_HEAD = "sac+logos+ava1-l14-linearMSE.pth"


def materialize_tiny_rewards(cache_dir: str | Path | None = None, seed: int = 0) -> Path:
    """Write the three twins once under ``cache_dir`` (atomically, like the model twins) and return the folder."""
    from models.twins import materialize_folder, recipe_key
    from rewards.tiny_imagereward import MED_CONFIG, VISION, build_tiny_imagereward

    def write(folder: Path) -> None:
        build_tiny_hps(folder / "hps", seed)
        build_tiny_hf_clip(
            folder / "pickscore" / "model", folder / "pickscore" / "processor", seed + 1, legacy_processor=True
        )
        build_tiny_hf_clip(folder / "clip", folder / "clip", seed + 2)
        build_tiny_aesthetic_head(folder / "aesthetic", HF_PROJECTION, seed + 3)
        build_tiny_imagereward(folder / "imagereward", seed + 4)
        (folder / "done").write_text("")

    key = recipe_key(VERSION, seed, OPEN_CLIP_CFG, HF_VISION, HF_TEXT, VISION, MED_CONFIG)
    return materialize_folder("tiny_rewards", key, write, cache_dir, marker="done")


#: reward=multi's components (conf/reward/multi.yaml): component name -> the reward option it composes
MULTI_COMPONENTS = {"hps": "hps", "pickscore": "pickscore", "clip": "clip"}


def tiny_reward_overrides(
    root: Path, reward: str, key: str = "reward", components: Mapping[str, str] | None = None
) -> list[str]:
    """Command-line overrides that point ``reward=<reward>`` (or the multi component at ``key``) at the twins.
    ``components`` (reward=multi only): component name -> its reward option, for a multi whose components differ from
    conf/reward/multi.yaml's (a preset that adds one)."""
    if reward == "hps":
        return [f"{key}.path={root / 'hps'}", f"{key}.arch={root / 'hps' / (OPEN_CLIP_ARCH + '.json')}"]
    if reward == "pickscore":
        return [
            f"{key}.path={root / 'pickscore' / 'model'}",
            f"{key}.processor_path={root / 'pickscore' / 'processor'}",
        ]
    if reward in ("clip", "diversity"):
        return [f"{key}.path={root / 'clip'}"]
    if reward == "imagereward":
        return [f"{key}.path={root / 'imagereward'}", f"{key}.tokenizer_path={root / 'imagereward' / 'tokenizer'}"]
    if reward == "aesthetic":
        return [f"{key}.path={root / 'clip'}", f"{key}.head_path={root / 'aesthetic'}"]
    if reward == "multi":
        parts = MULTI_COMPONENTS if components is None else components
        return [o for n, c in parts.items() for o in tiny_reward_overrides(root, c, f"{key}.components.{n}")]
    return []


if __name__ == "__main__":
    import sys

    root = materialize_tiny_rewards(sys.argv[1] if len(sys.argv) > 1 else None)
    for name in ("hps", "pickscore", "clip", "aesthetic", "imagereward", "multi"):
        print(f"reward={name}", " ".join(tiny_reward_overrides(root, name)))
