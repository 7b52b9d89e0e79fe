"""model=tiny_flux_pretrained (models/tiny_flux_pretrained.py): the tiny FLUX twin with its transformer pre-trained by
flow matching, built once into the cache and loaded through the real FLUX adapter; the claim studies' starting point
(scripts/bench_eam.py ``pretrained_twin`` reads it) and the comparison protocol's."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from conftest import CONF, compose
from launcher.validate import validate
from rewardflow.errors import ConfigError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

STEPS = 3  # a few pre-training steps: the folder, not the quality, is under test


def test_the_pretraining_prompts_are_the_demos_in_order():
    from models.tiny_flux_pretrained import PROMPTS

    assert list(PROMPTS) == list(OmegaConf.load(CONF / "data" / "demo.yaml").prompts)


def test_the_option_composes_as_the_twin_with_pretraining_steps():
    cfg = compose(["model=tiny_flux_pretrained"])
    validate(cfg)
    twin = compose(["model=tiny_flux"])
    assert cfg.model.name == "tiny_flux_pretrained" and cfg.model.pretrain_steps == 600
    assert cfg.eval.sampling_steps == twin.eval.sampling_steps  # conf/inference/tiny_flux_pretrained.yaml
    assert cfg.method.group_size == twin.method.group_size and cfg.optimizer.lr == twin.optimizer.lr  # the CPU budget
    with pytest.raises(ConfigError, match=re.escape("model.pretrain_steps: must be >= 1 (got 0)")):
        validate(compose(["model=tiny_flux_pretrained", "model.pretrain_steps=0"]))


def test_the_plan_knows_it_as_a_flux_twin():
    from launcher.plan.model_sizes import family_of, is_tiny_twin, transformer_config
    from models.tiny_flux import TRANSFORMER

    model = OmegaConf.to_container(compose(["model=tiny_flux_pretrained"]).model)
    assert family_of(model) == "flux" and is_tiny_twin(model)
    assert transformer_config(model, "flux") == (dict(TRANSFORMER), "tiny twin")


@pytest.mark.slow  # builds the tiny FLUX twin (minutes under load when the cache is empty) and pre-trains twice
def test_the_folder_holds_the_pretrained_transformer_built_once(monkeypatch):
    import models.tiny_flux_pretrained as pre
    from bench_eam import pretrained_twin
    from launcher.components import build
    from models.flux import FluxBackbone
    from models.tiny_flux import materialize_tiny_flux
    from models.tiny_flux_config import TinyFluxModelConfig

    cfg = compose(["model=tiny_flux_pretrained", f"model.pretrain_steps={STEPS}"])
    bb = build(cfg.model, "model")
    trained = {k: v.detach().clone() for k, v in bb.transformer.state_dict().items()}
    # the same pre-training, by hand, on a fresh copy of the random twin
    fresh = FluxBackbone(TinyFluxModelConfig(path=str(materialize_tiny_flux())))
    random_weights = {k: v.detach().clone() for k, v in fresh.transformer.state_dict().items()}
    expected = pre.flow_matching_pretrain(fresh, STEPS, seed=0)
    assert trained.keys() == expected.keys()
    assert all(torch.equal(trained[k], expected[k]) for k in trained)  # save_pretrained keeps fp32 exactly
    assert any(not torch.equal(trained[k], random_weights[k]) for k in trained)
    assert (
        bb.twin_recipe == f"rewardflow tiny twin: model=tiny_flux_pretrained model.seed=0 model.pretrain_steps={STEPS}"
    )

    # built once: a second build and the claim studies' state read the folder, they do not pre-train again
    def no_training(*args, **kwargs):
        raise AssertionError("pre-trained again")

    monkeypatch.setattr(pre, "flow_matching_pretrain", no_training)
    again = build(cfg.model, "model")
    assert all(torch.equal(again.transformer.state_dict()[k], trained[k]) for k in trained)
    state = pretrained_twin(STEPS)
    assert all(torch.equal(state[k], trained[k]) for k in trained)
