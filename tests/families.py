"""The four model families' tiny twins, as the tests build them (shared by the family, FSDP and e2e tests)."""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class Family:
    name: str                 # config option (model=<name>)
    backbone: str             # dotted class of the tiny twin's backbone
    materialize: str          # dotted function writing the twin folder
    kwargs: dict = field(default_factory=dict)     # tiny sizes (as conf/model/<name>.yaml)
    timestep_scale: float = 1.0                     # what the transformer receives per unit sigma
    integer_timestep: bool = False
    cfg: bool = False                               # true CFG (batch-2 forward) by default
    video: bool = False

    def cls(self):
        module, name = self.backbone.rsplit(".", 1)
        return getattr(importlib.import_module(module), name)

    def path(self, cache_dir=None) -> str:
        module, name = self.materialize.rsplit(".", 1)
        return str(getattr(importlib.import_module(module), name)(cache_dir))

    def build(self, **overrides):
        return self.cls()(**{**self.kwargs, **overrides})

    def pipeline_kwargs(self, bb) -> dict:
        """Arguments of the family's diffusers pipeline call that match the backbone's settings."""
        common = dict(height=bb.height, width=bb.width, max_sequence_length=bb.max_sequence_length)
        if self.name == "tiny_flux":
            return dict(common, guidance_scale=bb.guidance)
        if self.name == "tiny_qwenimage":
            return dict(common, true_cfg_scale=bb.guidance_scale, negative_prompt=bb.negative_prompt)
        if self.name == "tiny_wan2.1":
            return dict(common, num_frames=bb.num_frames, guidance_scale=bb.guidance_scale,
                        negative_prompt=bb.negative_prompt)
        return dict(common, guidance_scale=bb.guidance_scale, negative_prompt=bb.negative_prompt)

    def images(self, n: int, bb, seed: int = 0) -> torch.Tensor:
        """Random images (or frames) in [0, 1] of the backbone's size."""
        g = torch.Generator().manual_seed(seed)
        shape = (n, bb.num_frames, 3, bb.height, bb.width) if self.video else (n, 3, bb.height, bb.width)
        return torch.rand(shape, generator=g)


FAMILIES = {
    "tiny_flux": Family("tiny_flux", "models.tiny_flux.TinyFluxBackbone", "models.tiny_flux.materialize_tiny_flux",
                        dict(height=32, width=32, max_sequence_length=16)),
    "tiny_sd35m": Family("tiny_sd35m", "models.tiny_sd3.TinySD3Backbone", "models.tiny_sd3.materialize_tiny_sd3",
                         dict(height=32, width=32, max_sequence_length=16, guidance_scale=4.5),
                         timestep_scale=1000.0, cfg=True),
    "tiny_qwenimage": Family("tiny_qwenimage", "models.tiny_qwenimage.TinyQwenImageBackbone",
                             "models.tiny_qwenimage.materialize_tiny_qwenimage",
                             dict(height=32, width=32, max_sequence_length=32, guidance_scale=4.0), cfg=True),
    "tiny_wan2.1": Family("tiny_wan2.1", "models.tiny_wan.TinyWanBackbone", "models.tiny_wan.materialize_tiny_wan",
                          dict(height=32, width=32, num_frames=5, max_sequence_length=16, guidance_scale=4.5),
                          timestep_scale=1000.0, integer_timestep=True, cfg=True, video=True),
}
NAMES = list(FAMILIES)
