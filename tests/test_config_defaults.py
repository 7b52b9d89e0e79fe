"""A default is written once: the config dataclass beside each component holds it, and no YAML under conf/ restates
it. An option YAML sets only what differs from its schema; train.yaml and the experiment presets set only what differs
from the options they compose (a preset on a CPU model may pin a key of the demo's budget, conf/budget/cpu_demo.yaml,
which that model picks, so that the demo's scale never leaks into the preset)."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from conftest import CONF, group_options
from launcher.config import TrainConfig, all_schemas

COMPONENT_GROUPS = ["method", "model", "reward", "data", "cluster", "logger"]
ABSENT = object()


def leaves(node, prefix=()):
    """``(path, value)`` of every leaf of a plain container (lists are values)."""
    if isinstance(node, dict) and node:
        for k, v in node.items():
            yield from leaves(v, (*prefix, k))
    else:
        yield prefix, node


def lookup(node, path):
    for k in path:
        if not isinstance(node, dict) or k not in node:
            return ABSENT
        node = node[k]
    return node


def yaml_of(path: Path) -> tuple[list, dict]:
    """A YAML file's defaults list and its own values."""
    raw = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    return raw.pop("defaults", []), raw


def schema_entry(defaults: list) -> tuple[str, str, str]:
    """``(group, name, package)`` of the ``/schema/<group>/<name>@<package>`` entry of a defaults list."""
    (entry,) = [d for d in defaults if isinstance(d, str) and d.startswith("/schema/")]
    target, package = entry.split("@")
    _, _, group, name = target.split("/")
    return group, name, package


def schema_defaults(group: str, name: str) -> dict:
    return OmegaConf.to_container(OmegaConf.structured(all_schemas()[group][name]), resolve=False, enum_to_str=True)


def option_values(group: str, option: str) -> dict:
    """What ``<group>=<option>`` gives on its own: its schema's defaults with the option YAML's values merged in."""
    defaults, body = yaml_of(CONF / group / f"{option}.yaml")
    schema_group, name, package = schema_entry(defaults)
    merged = OmegaConf.merge(schema_defaults(schema_group, name), body.get(group, {}) if package == group else body)
    return OmegaConf.to_container(merged, resolve=False, enum_to_str=True)


def restated(body: dict, given) -> list[str]:
    """Keys of ``body`` whose value equals what ``given(path)`` says the composition holds without it."""
    return [".".join(path) for path, value in leaves(body) if path and given(path) == value]


@pytest.mark.parametrize("group,option", [(g, o) for g in COMPONENT_GROUPS for o in group_options(g)])
def test_an_option_sets_only_what_differs_from_its_schema(group, option):
    defaults, body = yaml_of(CONF / group / f"{option}.yaml")
    schema_group, name, package = schema_entry(defaults)
    assert schema_group == group
    own = body if package == "_here_" else body.get(package, {})  # @cluster: a global file's cluster.* keys
    schema = schema_defaults(group, name)
    assert not restated(own, lambda path: lookup(schema, path)), f"conf/{group}/{option}.yaml restates defaults"


def choices(defaults: list) -> dict[str, str]:
    """The group options a defaults list picks (``method: dance_grpo`` or ``override /method: eam``)."""
    out = {}
    for d in defaults:
        if isinstance(d, dict):
            for key, value in d.items():
                group = key.removeprefix("override ").strip("/")
                if group in COMPONENT_GROUPS and value is not None:
                    out[group] = value
    return out


#: option files merged into ``eval`` by train.yaml's optional defaults: ``inference@eval: ${model}``, ``eval: ${data}``
EVAL_OVERLAYS = {"inference": "model", "eval": "data"}


def overlay_files() -> list[Path]:
    return sorted(path for folder in EVAL_OVERLAYS for path in (CONF / folder).glob("*.yaml"))


def given_by(picked: dict[str, str]):
    """``path -> value`` of a composition that picks ``picked``, before train.yaml and the presets set anything."""
    root = OmegaConf.to_container(OmegaConf.structured(TrainConfig), resolve=False)
    for folder, group in EVAL_OVERLAYS.items():
        overlay = CONF / folder / f"{picked.get(group)}.yaml"
        if overlay.is_file():
            root["eval"].update(yaml_of(overlay)[1])

    def given(path):
        if path[0] in COMPONENT_GROUPS:
            return lookup(option_values(path[0], picked[path[0]]), path[1:])
        return lookup(root, path)

    return given


@pytest.mark.parametrize("path", overlay_files(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_an_eval_overlay_sets_only_what_differs_from_the_eval_schema(path):
    """conf/inference/<model>.yaml and conf/eval/<data>.yaml (merged into ``eval``) state only what differs from
    ``EvalConfig``."""
    defaults, body = yaml_of(path)
    schema = OmegaConf.to_container(OmegaConf.structured(TrainConfig), resolve=False)["eval"]
    assert not defaults and set(body) <= set(schema), f"{path}: not keys of eval"
    assert not restated(body, lambda p: lookup(schema, p)), f"{path} restates defaults"


def preset_choices(name: str) -> dict[str, str]:
    """The options experiment=<name> composes: train.yaml's, then those of the presets it builds on, then its own."""
    picked = choices(yaml_of(CONF / "train.yaml")[0])
    for d in yaml_of(CONF / "experiment" / f"{name}.yaml")[0]:
        if isinstance(d, str) and d != "_self_":
            picked.update(preset_choices(d))
    picked.update(choices(yaml_of(CONF / "experiment" / f"{name}.yaml")[0]))
    return picked


def test_train_yaml_sets_only_what_differs_from_the_default_options():
    defaults, body = yaml_of(CONF / "train.yaml")
    assert not restated(body, given_by(choices(defaults))), "conf/train.yaml restates defaults"


def budget_of(model: str) -> dict:
    """The values of the budget ``model=<model>`` picks (``/budget@_global_: <name>`` in its defaults), or none."""
    for d in yaml_of(CONF / "model" / f"{model}.yaml")[0]:
        if isinstance(d, dict) and "/budget@_global_" in d:
            return yaml_of(CONF / "budget" / f"{d['/budget@_global_']}.yaml")[1]
    return {}


@pytest.mark.parametrize("name", group_options("experiment"))
def test_a_preset_sets_only_what_differs_from_the_options_it_composes(name):
    _, body = yaml_of(CONF / "experiment" / f"{name}.yaml")
    demo = {".".join(path) for path, _ in leaves(budget_of(preset_choices(name)["model"]))}
    found = [k for k in restated(body, given_by(preset_choices(name))) if k not in demo]
    assert not found, f"conf/experiment/{name}.yaml restates defaults: {found}"
