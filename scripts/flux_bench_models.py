"""The FLUX-class transformers the benches run (docs/development.md#the-flux-small-configuration), each saved once
with the tiny twin's text encoders and an untrained VAE, like a hub folder (models/tiny_flux.py); the VAE's colour
pre-training matters for what a reward sees, not for cost.

* ``small`` (the benches' default): 2 double + 4 single blocks, 4 heads x 32, 16 input channels (the twin VAE's 4
  latent channels packed 2x2), RoPE axes (8, 12, 12), text width 32 as the twin's encoders;
* ``medium``: 4 double + 8 single blocks, 8 heads x 32;
* ``tiny``: the twin's own transformer (quick smoke runs); ``wide``: FLUX.1-dev's block width, 24 heads x 128.

``wide_text`` widens the transformer's text inputs to 64 and the CLIP / T5 encoders to match (bench_flash.py's and
bench_nft.py's FLUX "small").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from models.tiny_flux import TRANSFORMER, WIDE_TRANSFORMER

# the twin's transformer with 4 single blocks and 4 heads x 32 (RoPE axes summing to the head width)
SMALL: dict[str, Any] = {
    **TRANSFORMER,
    "num_single_layers": 4,
    "attention_head_dim": 32,
    "num_attention_heads": 4,
    "axes_dims_rope": [8, 12, 12],
}
CONFIGS: dict[str, dict[str, Any]] = {
    "small": SMALL,
    "medium": {**SMALL, "num_layers": 4, "num_single_layers": 8, "num_attention_heads": 8},
    "tiny": TRANSFORMER,
    "wide": WIDE_TRANSFORMER,
}
# the text encoders' sizes at a text width of 64 (hidden / projection and d_model = the transformer's text inputs)
CLIP_64 = dict(hidden_size=64, intermediate_size=128, projection_dim=64)
T5_64 = dict(d_model=64, d_kv=16, d_ff=128)


def model_folder(config: str, wide_text: bool = False, **changes: Any) -> Path:
    """The folder of ``CONFIGS[config]`` with ``changes`` to its keys (e.g. ``num_layers``); ``wide_text``: the text
    inputs and encoders at width 64 (above). ``model=tiny_flux model.path=<folder>`` loads it."""
    from models.tiny_flux import materialize_tiny_flux_variant

    transformer = {**CONFIGS[config], **changes}
    if not wide_text:
        return materialize_tiny_flux_variant(transformer)
    transformer.update(joint_attention_dim=64, pooled_projection_dim=64)
    return materialize_tiny_flux_variant(transformer, clip=CLIP_64, t5=T5_64)
