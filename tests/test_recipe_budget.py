"""The CPU demo's budget applies to the CPU models only (issue 27 item 2): conf/budget/cpu_demo.yaml is picked by the
tiny twins' and the toy's model configs, so a real family composes its method's recipe (docs/configuration.md):
the method's own scale and its recipe's learning rate for the run's fine-tuning mode (``method.recipe_lr``).
``rewardflow`` with no arguments is still the CPU demo; validation warns, naming ``optimizer.lr``, when a real family
runs with a toy's rate."""

from __future__ import annotations

import itertools

import pytest
from omegaconf import OmegaConf

from conftest import CONF, compose, group_options
from launcher.config import all_schemas
from launcher.toy_values import toy_values

BUDGET = OmegaConf.to_container(OmegaConf.load(CONF / "budget" / "cpu_demo.yaml"))
CPU_MODELS = [m for m in group_options("model") if m.startswith(("tiny_", "toy_"))]
REAL_MODELS = [m for m in group_options("model") if m not in CPU_MODELS]


def recipe(method: str) -> dict:
    """The method's recipe values: its config dataclass's defaults (resolved, e.g. JAGG's stock values)."""
    root = OmegaConf.create({"method": OmegaConf.structured(all_schemas()["method"][method])})
    return OmegaConf.to_container(root, resolve=True)["method"]


def test_the_real_families_and_the_cpu_models_are_the_model_options():
    assert REAL_MODELS == ["flux", "qwenimage", "sd35m", "wan2.1"] and len(CPU_MODELS) == 6


@pytest.mark.parametrize("model,method", itertools.product(REAL_MODELS, group_options("method")))
def test_a_real_family_composes_its_methods_recipe_not_the_demos(model, method):
    expected = recipe(method)
    for finetune in ("lora", "full"):
        cfg = compose([f"model={model}", f"method={method}", f"model.finetune={finetune}"])
        for key in BUDGET["method"]:
            assert cfg.method[key] == expected[key], (key, finetune)
        assert cfg.optimizer.lr == expected["recipe_lr"][finetune] != BUDGET["optimizer"]["lr"]
    cfg = compose([f"model={model}", f"method={method}"])
    assert cfg.optimizer.lr == expected["recipe_lr"][str(cfg.model.finetune)]
    assert not toy_values(OmegaConf.to_object(cfg))


@pytest.mark.parametrize("model", CPU_MODELS)
def test_the_cpu_models_pick_the_demo_budget(model):
    cfg = compose([f"model={model}", "method=flow_grpo"])
    for key, value in BUDGET["method"].items():
        assert cfg.method[key] == value, key
    assert cfg.optimizer.lr == BUDGET["optimizer"]["lr"]


def test_rewardflow_without_arguments_is_the_cpu_demo():
    cfg = compose([])
    assert cfg.model.name == "tiny_flux" and cfg.method.name == "dance_grpo"
    assert (cfg.method.group_size, cfg.method.prompts_per_step, cfg.method.sampling_steps) == (8, 4, 10)
    assert cfg.method.update_batch == 32 and cfg.optimizer.lr == 3e-3


def test_a_real_family_with_the_demos_learning_rate_is_warned_about():
    """launcher.validate logs each of these messages as a warning."""
    (message,) = toy_values(OmegaConf.to_object(compose(["model=flux", "method=dance_grpo", "optimizer.lr=3e-3"])))
    assert "10x method.recipe_lr.lora=0.0003" in message and "cpu_demo" in message and "Fix" in message
    full = compose(["model=flux", "model.finetune=full", "optimizer.lr=3e-3"])
    assert "300x method.recipe_lr.full" in toy_values(OmegaConf.to_object(full))[0]
    assert not toy_values(OmegaConf.to_object(compose(["model=flux", "optimizer.lr=3e-4"])))
    assert not toy_values(OmegaConf.to_object(compose(["optimizer.lr=3e-3"])))  # the tiny twin: the demo's rate
