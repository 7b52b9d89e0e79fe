"""PickScore and CLIPScore: a transformers ``CLIPModel`` scored as ``logit_scale x cosine / divide_by``.

Both load with ``CLIPModel.from_pretrained`` plus the processor's ``CLIPTokenizer`` and ``CLIPImageProcessor``
from a hub id or a local folder. The processor supplies the tokenizer and the image-processor *settings* (resize,
crop, mean/std), which are then applied as differentiable tensor ops (:mod:`rewards.preprocess`) instead of the
processor's PIL/uint8 path.

Scales, which the peers disagree on (docs/rewards.md#conventions):

* PickScore_v1 (``yuvalkirstain/PickScore_v1``, processor ``laion/CLIP-ViT-H-14-laion2B-s32B-b79K``): raw
  ``logit_scale x cosine`` (about 18-23 for real images) by default; ``divide_by=26`` gives flow_grpo's and
  Flow-Factory's ~0-1 scale. DanceGRPO uses the cosine alone (``divide_by`` = the logit scale, ~100).
* CLIPScore (``openai/clip-vit-large-patch14``): ``logits_per_image / 100`` by default, as flow_grpo and
  DiffusionNFT do; since that model's logit scale is 100 this is the plain cosine. UniRL divides by 30; Hessel et
  al.'s CLIPScore is ``2.5 x max(cosine, 0)``.

Under GRPO a constant scale cancels in the per-group advantages; it matters for logged values, for weighted sums
(``reward=multi``) and for adjoint methods, whose reward gradient it scales.
"""

from __future__ import annotations

import torch

from rewards.clip_base import CLIPStyleReward
from rewards.clip_image import ImageGeometry
from rewards.hf_clip_config import CLIPScoreRewardConfig, PickScoreRewardConfig


def _features(out) -> torch.Tensor:
    """transformers 5 returns a ModelOutput whose ``pooler_output`` is the projected embedding; 4.x a tensor."""
    return out if isinstance(out, torch.Tensor) else out.pooler_output


class HFCLIPReward(CLIPStyleReward[PickScoreRewardConfig | CLIPScoreRewardConfig]):
    """A ``CLIPModel`` reward: ``logit_scale.exp() x cosine(image, prompt) / divide_by``, built from its typed config:
    ``cfg.path`` is a hub id or local folder of the ``CLIPModel`` (``config.json`` + safetensors or .bin weights),
    ``cfg.processor_path`` that of the processor (tokenizer + ``preprocessor_config.json``; null: ``path``),
    ``cfg.divide_by`` the scale convention (see the module docstring)."""

    def __init__(self, cfg: PickScoreRewardConfig | CLIPScoreRewardConfig):
        super().__init__(cfg)
        from transformers import CLIPImageProcessor, CLIPModel, CLIPTokenizer

        path, processor_path = cfg.path, cfg.processor_path
        self.divide_by = float(cfg.divide_by)
        self.model = CLIPModel.from_pretrained(path, torch_dtype=torch.float32)
        # the processor's two halves by their concrete classes: AutoProcessor/AutoTokenizer resolve the class from
        # config.json, which a processor-only folder lacks and which offline hub loading then cannot find
        self.tokenizer = CLIPTokenizer.from_pretrained(processor_path or path)
        # resize/crop/normalisation from the processor config, so a checkpoint's own settings are honoured
        self.geometry = ImageGeometry.from_processor(CLIPImageProcessor.from_pretrained(processor_path or path))
        self.max_text_tokens = int(self.model.config.text_config.max_position_embeddings)
        # read once in fp32: in bf16 the stored log-scale 4.6052 rounds to 4.5938, i.e. 98.9 instead of 100
        self.logit_scale = float(self.model.logit_scale.detach().float().exp())
        self._freeze()

    def preprocess(self, images: torch.Tensor) -> torch.Tensor:
        return self.geometry(images)

    def encode_images(self, pixels: torch.Tensor) -> torch.Tensor:
        return _features(self.model.get_image_features(pixel_values=pixels))

    def encode_texts(self, prompts: list[str]) -> torch.Tensor:
        tok = self.tokenizer(
            prompts, padding=True, truncation=True, max_length=self.max_text_tokens, return_tensors="pt"
        ).to(next(self.model.parameters()).device)
        return _features(self.model.get_text_features(input_ids=tok["input_ids"], attention_mask=tok["attention_mask"]))

    def cosine_scale(self) -> float:
        return self.logit_scale / self.divide_by


class PickScoreReward(HFCLIPReward):
    """PickScore_v1: raw ``logit_scale x cosine`` by default, ``divide_by=26`` for the ~0-1 convention."""


class CLIPScoreReward(HFCLIPReward):
    """CLIP ViT-L/14 image-text score, ``logits_per_image / 100`` (= cosine) by default."""
