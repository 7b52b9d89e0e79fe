"""The models' rules on values live in their config classes (torch-free, run before the run folder exists:
docs/configuration.md#validation); the numbers they hold must match the families' code."""

from __future__ import annotations

import pytest

from models import tiny_flux, tiny_qwenimage, tiny_sd3, tiny_wan
from models.tiny_flux_config import TinyFluxModelConfig
from models.tiny_qwenimage_config import TinyQwenImageModelConfig
from models.tiny_sd3_config import TinySD3ModelConfig
from models.tiny_wan_config import TinyWanModelConfig


@pytest.mark.parametrize(
    "config,multiple",
    [
        # the twin's VAE spatial factor x the 2x2 packing / patches, read from the twin's own recipe
        (TinyFluxModelConfig, 2 * 2 ** (len(tiny_flux.VAE["block_out_channels"]) - 1)),
        (TinyQwenImageModelConfig, 2 * 2 ** len(tiny_qwenimage.VAE["temperal_downsample"])),
        (TinySD3ModelConfig, tiny_sd3.TRANSFORMER["patch_size"] * 2 ** (len(tiny_sd3.VAE["block_out_channels"]) - 1)),
        (TinyWanModelConfig, tiny_wan.TRANSFORMER["patch_size"][1] * tiny_wan.VAE["scale_factor_spatial"]),
    ],
)
def test_a_tiny_twins_image_size_multiple_is_its_vaes(config, multiple):
    assert config.image_size_multiple == multiple


def test_the_tiny_wan_twins_frame_rule_is_its_vaes():
    assert TinyWanModelConfig.vae_temporal_factor == tiny_wan.VAE["scale_factor_temporal"]
