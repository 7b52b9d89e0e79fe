"""A tiny random ImageReward twin in the release's format (rewards/imagereward.py): ``ImageReward.pt`` with the
authors' key names (``blip.visual_encoder.*``, ``blip.text_encoder.*``, ``blip.vision_proj|text_proj.*``,
``mlp.layers.*``), a ``med_config.json`` of the same fields as the release's at toy width, and a bert-base-uncased
style tokenizer (``vocab.txt``) whose word pieces are single characters, so that every lower-case prompt tokenises.
It is written by mapping a tiny transformers model's keys back through :func:`rewards.imagereward.key_pairs`, and
loads through the same code as the real checkpoint."""

from __future__ import annotations

import json
import string
from pathlib import Path

import torch

#: the ViT: width 128 (2 heads of BLIP's 64), 2 blocks, patch 16 at 224 px (the real geometry, 197 tokens)
VISION = dict(width=128, depth=2, patch=16, image_size=224, mlp=256)
#: med_config.json as the release's (BLIP's configs/med_config.json fields), at toy width
MED_CONFIG = {
    "architectures": ["BertModel"],
    "attention_probs_dropout_prob": 0.1,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "hidden_size": 64,
    "initializer_range": 0.02,
    "intermediate_size": 128,
    "layer_norm_eps": 1e-12,
    "max_position_embeddings": 40,
    "model_type": "bert",
    "num_attention_heads": 2,
    "num_hidden_layers": 2,
    "pad_token_id": 0,
    "type_vocab_size": 2,
    "vocab_size": 0,  # set to the twin vocabulary's size + BLIP's 2 added tokens
    "encoder_width": VISION["width"],
    "add_cross_attention": True,
}
PROJ_DIM = 256  # BLIP_Pretrain's embed_dim (vision_proj / text_proj, unused by the score)


def tiny_vocab() -> list[str]:
    """BERT's special tokens, then every printable lower-case character as a word and as a ``##`` piece."""
    chars = string.ascii_lowercase + string.digits + string.punctuation
    return ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *chars, *("##" + c for c in chars)]


def write_tokenizer(folder: Path) -> None:
    from transformers import BertTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    vocab = {t: i for i, t in enumerate(tiny_vocab())}
    BertTokenizer(vocab=vocab, do_lower_case=True).save_pretrained(folder)  # vocab.txt + tokenizer.json


def med_config() -> dict:
    return {**MED_CONFIG, "vocab_size": len(tiny_vocab()) + 2}


def build_tiny_imagereward(folder: Path, seed: int = 0) -> None:
    """``folder/ImageReward.pt``, ``folder/med_config.json`` and ``folder/tokenizer/``."""
    from transformers import BlipVisionConfig

    from rewards.imagereward import VIT_EPS, ImageRewardModel, key_pairs, text_config

    folder.mkdir(parents=True, exist_ok=True)
    write_tokenizer(folder / "tokenizer")
    med = med_config()
    (folder / "med_config.json").write_text(json.dumps(med, indent=2))
    v = VISION
    vcfg = BlipVisionConfig(
        hidden_size=v["width"],
        intermediate_size=v["mlp"],
        num_hidden_layers=v["depth"],
        num_attention_heads=v["width"] // 64,
        image_size=v["image_size"],
        patch_size=v["patch"],
        layer_norm_eps=VIT_EPS,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        sizes = [med["hidden_size"], 1024, 128, 64, 16, 1]
        head = {}
        for i, (a, b) in zip((0, 2, 4, 6, 7), zip(sizes, sizes[1:])):
            head[f"layers.{i}.weight"], head[f"layers.{i}.bias"] = torch.randn(b, a) / a**0.5, torch.zeros(b)
        model = ImageRewardModel(vcfg, text_config(med, v["width"]), head)
        # weights of a size that lets the image and the prompt move the score (transformers' init, std 0.02, leaves
        # the first token's output almost constant through two random towers)
        ours = {k: t + 0.1 * torch.randn_like(t) if t.is_floating_point() else t for k, t in model.state_dict().items()}
        state = {old: ours[new].contiguous() for old, new in key_pairs(v["depth"], list(model.text.state_dict()))}
        state["blip.vision_proj.weight"] = torch.randn(PROJ_DIM, v["width"]) * 0.02
        state["blip.text_proj.weight"] = torch.randn(PROJ_DIM, med["hidden_size"]) * 0.02
    state["blip.vision_proj.bias"] = state["blip.text_proj.bias"] = torch.zeros(PROJ_DIM)
    state["blip.text_encoder.embeddings.position_ids"] = torch.arange(med["max_position_embeddings"]).expand((1, -1))
    torch.save(state, folder / "ImageReward.pt")
