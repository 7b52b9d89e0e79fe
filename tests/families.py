"""The model families' tiny twins as the tests build them: every ``conf/model/tiny_*.yaml`` option, built through its
family's real adapter from the config that option composes (shared by the family, FSDP, e2e and GPU-check tests).
What differs between families (pipeline arguments, timestep convention, video or image) the backbones declare."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

import torch
from hydra.utils import get_class
from omegaconf import OmegaConf

from conftest import compose, group_options


@dataclass(frozen=True)
class Family:
    name: str  # config option (model=<name>)

    def config(self, **overrides):
        """The twin's typed config as ``model=<name>`` composes it, with ``overrides`` replaced."""
        return dataclasses.replace(OmegaConf.to_object(compose([f"model={self.name}"]).model), **overrides)

    def cls(self):
        return get_class(self.config()._target_)

    @property
    def true_cfg(self) -> bool:
        """True CFG (a batch-2 forward) in the option's own setting (``DiffusersBackbone.do_cfg``)."""
        return getattr(self.config(), "guidance_scale", 1.0) > 1.0

    def path(self, cache_dir=None) -> str:
        """The twin's folder (written on first use)."""
        return str(self.cls().materialize(cache_dir, self.config().seed))

    def build(self, keep_reference: bool = False, **overrides):
        return self.cls()(self.config(**overrides), keep_reference=keep_reference)

    def images(self, n: int, bb, seed: int = 0) -> torch.Tensor:
        """Random images (or frames) in [0, 1] of the backbone's size."""
        g = torch.Generator().manual_seed(seed)
        shape = (n, bb.num_frames, 3, bb.height, bb.width) if bb.video else (n, 3, bb.height, bb.width)
        return torch.rand(shape, generator=g)


#: the tiny twins' options that only change a twin's weights, not its family or classes (tested on their own:
#: tests/test_tiny_flux_pretrained.py); building them costs minutes of pre-training
WEIGHT_VARIANTS = {"tiny_flux_pretrained"}
NAMES = [name for name in group_options("model") if name.startswith("tiny_") and name not in WEIGHT_VARIANTS]
FAMILIES = {name: Family(name) for name in NAMES}


def real_family_overrides(overrides: list[str]) -> list[str]:
    """What makes a real family's config (``model=flux`` or a paper preset) validate on this GPU-less test machine:
    its tiny twin's folder as ``model.path`` (same layout as the published checkpoint), ``model.allow_cpu=true``, and
    its held-out rewards (:func:`held_out_reward_overrides`)."""
    from launcher.cluster.device_check import is_real_family

    model = OmegaConf.to_object(compose(overrides).model)
    if not is_real_family(model):
        return []
    twin = [f"model.path={FAMILIES[f'tiny_{model.name}'].path()}", "model.allow_cpu=true"]
    return [*twin, *held_out_reward_overrides(overrides)]


def held_out_reward_overrides(overrides: list[str]) -> list[str]:
    """The config's held-out rewards (``eval.rewards``: the full-size models' aesthetic and CLIP diversity, a paper
    preset's aesthetic) pointed at the reward twins (rewards/tiny_twins.py); none for the download-free ones."""
    from rewards.tiny_twins import materialize_tiny_rewards, tiny_reward_overrides

    held_out = compose(overrides).eval.rewards or {}
    if all(r.name in ("brightness", "color", "jpeg") or r.get("embedding") == "pixels" for r in held_out.values()):
        return []
    rewards = materialize_tiny_rewards(os.environ.get("REWARDFLOW_CACHE"))  # the session's cache (tests/conftest.py)
    return [o for n, r in held_out.items() for o in tiny_reward_overrides(rewards, r.name, f"eval.rewards.{n}")]
