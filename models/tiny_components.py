"""The tiny twins' shared components, written once: the CLIP and T5 text-encoder configs, the ``AutoencoderKL``
config and the tokenizers' word list. Each twin (``models/tiny_flux.py``, ``models/tiny_sd3.py``,
``models/tiny_wan.py``, ``models/tiny_qwenimage.py``) imports what it uses and states only its differences (e.g.
SD3.5's 16 latent channels and text width 64, Wan's encoder-only UMT5).

The sizes are diffusers' and transformers' own model-test sizes. They are part of every twin's recipe, which keys
the twin's cache folder (``models.twins.recipe_key``): a change here rebuilds the twins that use it, so bump the
twins' ``VERSION`` with it.
"""

from __future__ import annotations

from typing import Any

#: CLIP text encoder (FLUX's CLIP-L, SD3.5's CLIP-L and CLIP-G)
CLIP: dict[str, Any] = dict(
    bos_token_id=0,
    eos_token_id=1,
    pad_token_id=1,
    hidden_size=32,
    intermediate_size=37,
    layer_norm_eps=1e-5,
    num_attention_heads=4,
    num_hidden_layers=2,
    hidden_act="gelu",
    projection_dim=32,
    max_position_embeddings=77,
)
#: T5 encoder (FLUX's and SD3.5's T5-XXL; Wan's UMT5 without ``is_encoder_decoder``)
T5: dict[str, Any] = dict(
    d_model=32,
    d_kv=8,
    d_ff=37,
    num_layers=2,
    num_heads=4,
    relative_attention_num_buckets=8,
    dropout_rate=0.0,
    pad_token_id=0,
    eos_token_id=1,
    decoder_start_token_id=0,
    feed_forward_proj="gated-gelu",
    is_encoder_decoder=True,
)
#: ``AutoencoderKL`` of FLUX's layout (4 latent channels; SD3.5's twin widens it to 16); the scaling and shift are
#: the FLUX twin's, measured after its pre-training (models/tiny_pretrain.py)
VAE: dict[str, Any] = dict(
    in_channels=3,
    out_channels=3,
    down_block_types=["DownEncoderBlock2D"] * 2,
    up_block_types=["UpDecoderBlock2D"] * 2,
    block_out_channels=(8, 16),
    layers_per_block=1,
    latent_channels=4,
    norm_num_groups=4,
    use_quant_conv=False,
    use_post_quant_conv=False,
    shift_factor=0.0609,
    scaling_factor=1.5035,
    sample_size=32,
)
#: the vocabulary of the twins' T5 / BPE tokenizers (models/tiny_tokenizers.py): the demo prompts' words
WORDS = (
    "a photo of an image painted in the colour color red green blue yellow cyan magenta white black "
    "orange purple pink gray grey square circle cat dog tree house sky flower car with and on"
).split()
