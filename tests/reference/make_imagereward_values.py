"""Writes tests/reference/imagereward_values.json: the key names and shapes of the authors' ``ImageReward`` module's
state dict (the format of the released ImageReward.pt) and the scores its own ``ImageReward.score`` gives fixed
images and prompts, at toy width with weights drawn by :func:`fill` (so tests/test_imagereward.py rebuilds the same
state dict without storing it). The authors' code is read from a local clone at the pinned commit and run as it is
(nothing of it is copied here):

    repository  THUDM/ImageReward (Apache-2.0)
    commit      c1392c6dd0fd6ecd6d416c96959ab744a6d0a8fb
    files       ImageReward/ImageReward.py (ImageReward, MLP, _transform: the score), ImageReward/models/BLIP/
                blip_pretrain.py, blip.py, vit.py, med.py (the BLIP networks and tokenizer set-up)

Run where the authors' code imports: it needs timm (any 1.x: PatchEmbed, trunc_normal_, DropPath) and torchvision;
what it imports that transformers 5 and this environment lack is provided (fairscale's checkpoint_wrapper, used
only with gradient checkpointing; transformers.modeling_utils' chunking helpers, which moved to
transformers.pytorch_utils; the tokenizer's additional_special_tokens_ids; a no-op for med.py's init_weights call,
which transformers 5's needs post_init for: every weight is set by fill(); get_head_mask and invert_attention_mask
as transformers 4 defined them). The ViT is built at the tiny twin's width instead of ViT-L by replacing the
module's ``create_vit``, and bert-base-uncased by the twin's tokenizer (rewards/tiny_imagereward.py); BLIP's
``init_tokenizer`` still adds its [DEC] and [ENC] tokens.

Usage: python tests/reference/make_imagereward_values.py /path/to/ImageReward/.git
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import types
import zlib
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

REPO = "THUDM/ImageReward"
COMMIT = "c1392c6dd0fd6ecd6d416c96959ab744a6d0a8fb"
FILES = [
    "ImageReward/ImageReward.py",
    "ImageReward/models/BLIP/blip_pretrain.py",
    "ImageReward/models/BLIP/blip.py",
    "ImageReward/models/BLIP/vit.py",
    "ImageReward/models/BLIP/med.py",
]
OUT = Path(__file__).with_name("imagereward_values.json")
PROMPTS = ["a red car", "a photo of a cat, 4k!", "two dogs on the beach at sunset"]


def fill(key: str, shape) -> torch.Tensor:
    """The weights of entry ``key``: 0.1 N(0, 1) from a generator seeded by the key's CRC32 (layer norms' weights
    about 1), the same in the generator and the test whatever the order of the keys."""
    g = torch.Generator().manual_seed(zlib.crc32(key.encode()))
    t = 0.1 * torch.randn(tuple(shape), generator=g, dtype=torch.float32)
    if ("norm" in key.lower()) and key.endswith("weight"):
        t = t + 1.0
    return t


def reference_images() -> list[np.ndarray]:
    """Two 224 x 224 images (the model's own size: no resampling) and a 160 x 251 one (resized to 224 x 351 and
    cropped with an odd margin, where torchvision's rounded offset differs from a floored one), uint8 HWC."""
    g = torch.Generator().manual_seed(0)
    out = []
    for h, w in ((224, 224), (224, 224), (160, 251)):
        coarse = torch.rand(3, h // 16 + 1, w // 16 + 1, generator=g)
        smooth = torch.nn.functional.interpolate(coarse[None], size=(h, w), mode="bilinear")[0]
        img = 0.8 * smooth + 0.2 * torch.rand(3, h, w, generator=g)
        out.append((img * 255).round().to(torch.uint8).permute(1, 2, 0).numpy())
    return out


def import_authors(git_dir: str, root: Path):
    """The authors' modules from ``git_dir`` at COMMIT, imported as the package ImageReward without its
    ``__init__`` (which loads CLIP, BLIP and aesthetic scorers this does not need)."""
    for f in FILES:
        dest = root / f
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(
            subprocess.run(
                ["git", "--git-dir", git_dir, "show", f"{COMMIT}:{f}"], check=True, capture_output=True
            ).stdout
        )
    for name, folder in (
        ("ImageReward", "ImageReward"),
        ("ImageReward.models", "ImageReward/models"),
        ("ImageReward.models.BLIP", "ImageReward/models/BLIP"),
    ):
        pkg = types.ModuleType(name)
        pkg.__path__ = [str(root / folder)]
        sys.modules[name] = pkg
    # stubs for what this environment lacks (see the module docstring)
    for name in (
        "fairscale",
        "fairscale.nn",
        "fairscale.nn.checkpoint",
        "fairscale.nn.checkpoint.checkpoint_activations",
    ):
        sys.modules[name] = types.ModuleType(name)
    sys.modules["fairscale.nn.checkpoint.checkpoint_activations"].checkpoint_wrapper = lambda module: module
    import transformers.modeling_utils as mu
    import transformers.pytorch_utils as pu

    mu.apply_chunking_to_forward = pu.apply_chunking_to_forward
    mu.prune_linear_layer = pu.prune_linear_layer
    mu.find_pruneable_heads_and_indices = getattr(pu, "find_pruneable_heads_and_indices", None)
    import importlib

    med = importlib.import_module("ImageReward.models.BLIP.med")
    # transformers 5's init_weights needs post_init's bookkeeping, which med.py's BertModel predates; every weight
    # is overwritten by fill() anyway
    med.BertPreTrainedModel.init_weights = lambda self: None
    # two helpers of transformers 4's ModuleUtilsMixin that transformers 5 removed, as 4.x defined them
    if not hasattr(med.BertPreTrainedModel, "get_head_mask"):
        med.BertPreTrainedModel.get_head_mask = lambda self, head_mask, n, *a: (
            [None] * n if head_mask is None else head_mask
        )

    def invert_attention_mask(self, mask):
        ext = mask[:, None, :, :] if mask.dim() == 3 else mask[:, None, None, :]
        ext = ext.to(self.dtype)
        return (1.0 - ext) * torch.finfo(self.dtype).min

    if not hasattr(med.BertPreTrainedModel, "invert_attention_mask"):
        med.BertPreTrainedModel.invert_attention_mask = invert_attention_mask
    return importlib.import_module("ImageReward.ImageReward"), importlib.import_module("ImageReward.models.BLIP.blip")


def main(git_dir: str) -> None:
    from PIL import Image
    from transformers import BertTokenizer

    from rewards.tiny_imagereward import VISION, med_config, write_tokenizer

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ir, blip = import_authors(git_dir, root)
        write_tokenizer(root / "tokenizer")

        class TwinTokenizer(BertTokenizer):
            """blip.init_tokenizer's ``BertTokenizer.from_pretrained('bert-base-uncased')``: the twin's vocabulary,
            and the ``additional_special_tokens_ids`` that transformers 5 dropped (init_tokenizer reads [ENC]'s)."""

            @classmethod
            def from_pretrained(cls, _name, *args, **kwargs):
                return super().from_pretrained(root / "tokenizer")

            @property
            def additional_special_tokens_ids(self):
                return self.convert_tokens_to_ids(["[ENC]"])

        blip.BertTokenizer = TwinTokenizer
        pretrain = sys.modules["ImageReward.models.BLIP.blip_pretrain"]
        vit = sys.modules["ImageReward.models.BLIP.vit"]
        width = VISION["width"]
        pretrain.create_vit = lambda *args, **kwargs: (
            vit.VisionTransformer(
                img_size=VISION["image_size"],
                patch_size=VISION["patch"],
                embed_dim=width,
                depth=VISION["depth"],
                num_heads=width // 64,
                mlp_ratio=VISION["mlp"] / width,
            ),
            width,
        )
        med = med_config()
        (root / "med_config.json").write_text(json.dumps(med))
        model = ir.ImageReward(med_config=str(root / "med_config.json"), device="cpu")
        model.mlp = ir.MLP(med["hidden_size"])  # ImageReward.__init__ hard-codes MLP(768), BERT-base's width
        model.eval()
        state = model.state_dict()
        with torch.no_grad():
            for k, t in state.items():
                if t.is_floating_point():
                    t.copy_(fill(k, t.shape))
            scores = [float(model.score(p, Image.fromarray(im))) for p, im in zip(PROMPTS, reference_images())]
        keys = {k: {"shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch.")} for k, t in state.items()}
    OUT.write_text(
        json.dumps(
            {
                "source": {"repository": REPO, "commit": COMMIT, "files": FILES},
                "note": "ImageReward.score of the authors' module at toy width, weights from fill(key, shape)",
                "med_config": med,
                "vision": VISION,
                "keys": keys,
                "prompts": PROMPTS,
                "scores": scores,
            },
            indent=1,
        )
        + "\n"
    )
    print(f"wrote {OUT}: {len(keys)} keys, scores {scores}")


if __name__ == "__main__":
    main(sys.argv[1])
