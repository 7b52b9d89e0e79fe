"""reward=imagereward: ImageReward v1.0 (Xu et al., arXiv:2304.05977; github.com/THUDM/ImageReward, Apache-2.0), the
human-preference reward DanceGRPO, flow_grpo and DiffusionNFT report, on transformers' BLIP classes.

The release is one ``torch.save`` state dict, ``ImageReward.pt`` in ``THUDM/ImageReward``, of the authors'
``ImageReward`` module: ``blip.visual_encoder.*`` (BLIP's ViT-L/16 at 224 px), ``blip.text_encoder.*`` (BLIP's
"med" BERT, whose layers cross-attend to the image tokens; its config is the repo's ``med_config.json``),
``blip.vision_proj|text_proj.*`` (unused by the score) and ``mlp.layers.*`` (the aesthetic predictor's head,
rewards/mlp_head.py). The score of an image and its prompt is

    (mlp(text_encoder(tokens, cross-attending to visual_encoder(image))[:, 0]) - 0.16717362830052426) / 1.0333394966054072

with the prompt tokenised by bert-base-uncased padded to 35 tokens, and the image resized (shortest side to 224,
bicubic), centre-cropped (torchvision's rounding) and normalised with CLIP's mean and std.

Why transformers' classes rather than the ``image-reward`` package: the package pins ``timm==0.6.13`` and
``fairscale==0.4.13`` and its ``med.py`` imports helpers that transformers 5 no longer has in
``transformers.modeling_utils``. transformers' ``BlipVisionModel`` and ``BlipTextModel`` (``is_decoder=True`` builds
the cross-attention; called with ``is_decoder=False`` the text attention is bidirectional, as BLIP's encoder mode) are
the same networks under other names; transformers' ``convert_blip_original_pytorch_to_hf.py`` renames the vision
tower's keys and keeps the text encoder's. :func:`key_pairs` is that mapping, one pair per tensor:

| ImageReward.pt | transformers |
| --- | --- |
| ``blip.visual_encoder.cls_token`` / ``pos_embed`` | ``vision.embeddings.class_embedding`` / ``position_embedding`` |
| ``blip.visual_encoder.patch_embed.proj.*`` | ``vision.embeddings.patch_embedding.*`` |
| ``blip.visual_encoder.blocks.<i>.norm1|norm2.*`` | ``vision.encoder.layers.<i>.layer_norm1|layer_norm2.*`` |
| ``blip.visual_encoder.blocks.<i>.attn.qkv|proj.*`` | ``vision.encoder.layers.<i>.self_attn.qkv|projection.*`` |
| ``blip.visual_encoder.blocks.<i>.mlp.fc1|fc2.*`` | ``vision.encoder.layers.<i>.mlp.fc1|fc2.*`` |
| ``blip.visual_encoder.norm.*`` | ``vision.post_layernorm.*`` |
| ``blip.text_encoder.<rest>`` | ``text.<rest>`` (the same names) |
| ``mlp.layers.<i>.*`` | ``mlp.layers.<i>.*`` |

The vision tower's sizes are read from the weights (width, depth, patch, image size; heads = width / 64, BLIP's head
size), the text encoder's from ``med_config.json`` with its cross-attention width set to the vision width (as the
authors' ``BLIP_Pretrain`` does), and BLIP's ViT layer norms use eps 1e-6. A tiny twin written in the same key
format loads through this same code (rewards/tiny_twins.py); tests/test_imagereward.py pins its scores against the
authors' code (tests/reference/make_imagereward_values.py).
"""

from __future__ import annotations

import json
import logging
import math

import torch
from torch import nn

from rewardflow.dtypes import torch_dtype
from rewardflow.errors import ConfigError
from rewards.base import Reward
from rewards.imagereward_config import MED_CONFIG, ImageRewardConfig
from rewards.mlp_head import MLPHead, head_keys
from rewards.preprocess import CLIP_MEAN, CLIP_STD, normalize, resize_shortest_and_center_crop
from rewards.weights import fetch_file, is_local, load_tensors

log = logging.getLogger(__name__)

#: the standardisation of the raw head output (ImageReward.py: ``self.mean``, ``self.std``)
MEAN, STD = 0.16717362830052426, 1.0333394966054072
IMAGE_SIZE, MAX_TOKENS = 224, 35  # ImageReward.py: _transform(224), max_length=35
VISION, TEXT = "blip.visual_encoder.", "blip.text_encoder."
VIT_HEAD_DIM = 64  # BLIP's ViT-B (768 / 12) and ViT-L (1024 / 16)
VIT_EPS = 1e-6  # BLIP's vit.py: partial(nn.LayerNorm, eps=1e-6)
#: entries of the release that the score does not use
UNUSED = ("blip.vision_proj.", "blip.text_proj.", TEXT + "embeddings.position_ids")

_BLOCK = [("norm1", "layer_norm1"), ("attn.qkv", "self_attn.qkv"), ("attn.proj", "self_attn.projection")]
_BLOCK += [("norm2", "layer_norm2"), ("mlp.fc1", "mlp.fc1"), ("mlp.fc2", "mlp.fc2")]


def key_pairs(depth: int, text_keys: list[str]) -> list[tuple[str, str]]:
    """(ImageReward.pt key, key of :class:`ImageRewardModel`) for every tensor the score uses: a vision tower of
    ``depth`` blocks, the text encoder's ``text_keys`` (its state dict's), the head."""
    pairs = [
        (VISION + "cls_token", "vision.embeddings.class_embedding"),
        (VISION + "pos_embed", "vision.embeddings.position_embedding"),
    ]
    for p in ("weight", "bias"):
        pairs.append((f"{VISION}patch_embed.proj.{p}", f"vision.embeddings.patch_embedding.{p}"))
        for i in range(depth):
            pairs += [(f"{VISION}blocks.{i}.{a}.{p}", f"vision.encoder.layers.{i}.{b}.{p}") for a, b in _BLOCK]
        pairs.append((f"{VISION}norm.{p}", f"vision.post_layernorm.{p}"))
    pairs += [(TEXT + k, "text." + k) for k in text_keys]
    pairs += [("mlp." + k, "mlp." + k) for k in head_keys()]
    return pairs


def vision_config(state: dict[str, torch.Tensor]):
    """transformers' ``BlipVisionConfig`` of the ViT in ``state`` (ImageReward.pt keys), read from its shapes."""
    from transformers import BlipVisionConfig

    width = int(state[VISION + "cls_token"].shape[-1])
    patch = int(state[VISION + "patch_embed.proj.weight"].shape[-1])
    grid = math.isqrt(int(state[VISION + "pos_embed"].shape[1]) - 1)
    depth = 1 + max(int(k[len(VISION + "blocks.") :].split(".")[0]) for k in state if k.startswith(VISION + "blocks."))
    return BlipVisionConfig(
        hidden_size=width,
        intermediate_size=int(state[VISION + "blocks.0.mlp.fc1.weight"].shape[0]),
        num_hidden_layers=depth,
        num_attention_heads=max(1, width // VIT_HEAD_DIM),
        image_size=grid * patch,
        patch_size=patch,
        hidden_act="gelu",
        layer_norm_eps=VIT_EPS,
    )


def text_config(med: dict, vision_width: int):
    """transformers' ``BlipTextConfig`` of a BLIP ``med_config.json`` whose cross-attention reads ``vision_width``."""
    from transformers import BlipTextConfig

    return BlipTextConfig(
        vocab_size=med["vocab_size"],
        hidden_size=med["hidden_size"],
        encoder_hidden_size=vision_width,
        intermediate_size=med["intermediate_size"],
        num_hidden_layers=med["num_hidden_layers"],
        num_attention_heads=med["num_attention_heads"],
        max_position_embeddings=med["max_position_embeddings"],
        hidden_act=med.get("hidden_act", "gelu"),
        layer_norm_eps=med.get("layer_norm_eps", 1e-12),
        pad_token_id=med.get("pad_token_id", 0),
        bos_token_id=med["vocab_size"] - 2,  # BLIP's added [DEC] (30522 of 30524), unused by the score
        is_decoder=True,  # builds the cross-attention layers; forward(is_decoder=False) attends bidirectionally
    )


class ImageRewardModel(nn.Module):
    """The networks of ImageReward on transformers' BLIP classes: ``vision``, ``text``, ``mlp``."""

    def __init__(self, vision_cfg, text_cfg, head_state: dict[str, torch.Tensor]):
        super().__init__()
        from transformers import BlipTextModel, BlipVisionModel

        self.vision = BlipVisionModel(vision_cfg)
        self.text = BlipTextModel(text_cfg, add_pooling_layer=False)
        self.mlp = MLPHead(head_state)

    def forward(self, pixels: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        image_embeds = self.vision(pixel_values=pixels).last_hidden_state
        image_atts = torch.ones(image_embeds.shape[:-1], dtype=torch.long, device=image_embeds.device)
        out = self.text(
            input_ids=input_ids,
            attention_mask=attention_mask,
            encoder_hidden_states=image_embeds,
            encoder_attention_mask=image_atts,
        )
        return (self.mlp(out.last_hidden_state[:, 0, :].float()) - MEAN) / STD


def load_model(state: dict[str, torch.Tensor], med: dict, key: str = "reward.path") -> ImageRewardModel:
    """:class:`ImageRewardModel` holding the tensors of an ImageReward.pt state dict (see the module docstring).
    Built on the meta device and filled with the checkpoint's tensors, so no time goes into a random init."""
    missing = [
        k for k in (VISION + "cls_token", VISION + "pos_embed", VISION + "patch_embed.proj.weight") if k not in state
    ]
    if missing:
        raise ConfigError(
            f"{key}: the checkpoint holds no ImageReward model: it lacks {', '.join(missing)} (it has "
            f"{', '.join(sorted(state)[:5])}...). Fix: point {key} at THUDM/ImageReward's ImageReward.pt"
        )
    vcfg = vision_config(state)
    tcfg = text_config(med, vcfg.hidden_size)
    head = {k.removeprefix("mlp."): v for k, v in state.items() if k.startswith("mlp.layers.")}
    with torch.device("meta"):
        model = ImageRewardModel(vcfg, tcfg, {k: torch.empty(v.shape) for k, v in head.items()})
    pairs = key_pairs(vcfg.num_hidden_layers, list(model.text.state_dict()))
    absent = [old for old, _ in pairs if old not in state]
    if absent:
        raise ConfigError(
            f"{key}: the checkpoint lacks {len(absent)} tensors of ImageReward, e.g. {', '.join(absent[:4])}. Fix: "
            f"point {key} at THUDM/ImageReward's ImageReward.pt (a cut download or another BLIP checkpoint has this look)"
        )
    used = {old for old, _ in pairs}
    extra = [k for k in state if k not in used and not k.startswith(UNUSED)]
    if extra:
        log.debug("ImageReward: %d checkpoint entries not used by the score, e.g. %s", len(extra), extra[:4])
    try:
        model.load_state_dict({new: state[old].float() for old, new in pairs}, strict=True, assign=True)
    except RuntimeError as e:  # a shape that does not fit med_config.json
        raise ConfigError(
            f"{key}: the checkpoint does not fit its {MED_CONFIG} ({str(e).splitlines()[-1].strip()})"
        ) from None
    emb = model.text.embeddings  # the one buffer no checkpoint holds (non-persistent)
    emb.position_ids = torch.arange(tcfg.max_position_embeddings).expand((1, -1))
    return model.requires_grad_(False).eval()


def load_tokenizer(path: str):
    """bert-base-uncased with BLIP's two added tokens (blip.py's ``init_tokenizer``: ``[DEC]`` as bos, ``[ENC]``)."""
    from transformers import BertTokenizer

    tokenizer = BertTokenizer.from_pretrained(path)
    tokenizer.add_special_tokens({"bos_token": "[DEC]"})
    tokenizer.add_special_tokens({"additional_special_tokens": ["[ENC]"]})
    return tokenizer


class ImageRewardReward(Reward[ImageRewardConfig]):
    """ImageReward v1.0 built from its typed config (:class:`rewards.imagereward_config.ImageRewardConfig`)."""

    differentiable = True

    def __init__(self, cfg: ImageRewardConfig):
        super().__init__(cfg)
        checkpoint = fetch_file(cfg.path, cfg.filename)
        folder_or_repo = str(checkpoint.parent) if is_local(cfg.path) else cfg.path
        med = json.loads(fetch_file(folder_or_repo, MED_CONFIG).read_text(encoding="utf-8"))
        self.model = load_model(load_tensors("reward.path", checkpoint), med)
        self.tokenizer = load_tokenizer(cfg.tokenizer_path)
        self.dtype_name = cfg.dtype

    def tokens(self, prompts: list[str], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        tok = self.tokenizer(prompts, padding="max_length", truncation=True, max_length=MAX_TOKENS, return_tensors="pt")
        return tok["input_ids"].to(device), tok["attention_mask"].to(device)

    def preprocess(self, images: torch.Tensor) -> torch.Tensor:
        crop = resize_shortest_and_center_crop(images, IMAGE_SIZE, (IMAGE_SIZE, IMAGE_SIZE), round_offset=True)
        return normalize(crop, CLIP_MEAN, CLIP_STD)

    def score(self, images: torch.Tensor, prompts: list[str]) -> torch.Tensor:
        param = next(self.model.vision.parameters())
        dtype = torch_dtype(self.dtype_name, param.device.type)
        if param.dtype != dtype:  # the towers in the compute dtype, the head in fp32
            self.model.vision.to(dtype)
            self.model.text.to(dtype)
        pixels = self.preprocess(images.to(device=param.device, dtype=torch.float32)).to(dtype)
        return self.model(pixels, *self.tokens(prompts, param.device))
