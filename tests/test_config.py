"""Config composition over every group option and method x reward pair, and fail-fast validation (issue 2)."""

from __future__ import annotations

import dataclasses
import enum
import itertools
import subprocess
import sys
import typing

import pytest
from hydra.errors import ConfigCompositionException, MissingConfigException
from hydra.utils import get_class
from omegaconf import OmegaConf

from conftest import ROOT, compose, group_options, rewardflow_cmd
from families import WEIGHT_VARIANTS, held_out_reward_overrides, real_family_overrides
from launcher.train.trainer import RunInfo, Trainer
from launcher.validate import validate
from methods.grpo import GRPO
from rewardflow.errors import ConfigError
from rewards.tiny_twins import tiny_reward_overrides

GROUPS = ["method", "model", "reward", "data", "cluster", "logger", "experiment"]


def valid_overrides(group: str, option: str, tmp_path, tiny_rewards) -> list[str]:
    """Overrides that make ``group=option`` validate offline: preference rewards point at the tiny twins, prompt
    files at a local file (an experiment preset may name both)."""
    cfg = compose([f"{group}={option}"])
    parts = {n: c.name for n, c in cfg.reward.components.items()} if cfg.reward.name == "multi" else None
    extra = tiny_reward_overrides(tiny_rewards, cfg.reward.name, components=parts)
    if cfg.data.name == "file" or cfg.data.set is not None:  # a named set: a local copy of its split (no network)
        prompts = tmp_path / "prompts.txt"
        prompts.write_text("a red square\na blue sky\n")
        extra.append(f"data.path={prompts}")
        if cfg.eval.every:  # a named set's test split or data=file's held-out prompts (evaluated by default): a file
            extra.append(f"eval.prompts={prompts}")
    if cfg.data.set == "drawbench":
        extra.append("data.split=test")  # DrawBench is a test set only
    if group == "cluster" and cfg.cluster.get("tasks_per_node") is not None:  # whole prompt groups per rank (slurm: 8)
        ranks = int(OmegaConf.select(cfg, "cluster.tasks_per_node")) * int(cfg.cluster.get("nodes", 1))
        extra.append(f"method.prompts_per_step={ranks * -(-int(cfg.method.prompts_per_step) // ranks)}")
    real = real_family_overrides([f"{group}={option}"])  # a CPU model's preset may score downloaded rewards too
    held_out = [] if real else held_out_reward_overrides([f"{group}={option}"])
    return [f"{group}={option}", *extra, *real, *held_out]


def evaluation_only(cfg) -> bool:
    """A per-prompt metric (reward=diversity) is scored by the evaluation only: as the trained reward it is refused."""
    return bool(get_class(cfg.reward._target_).per_prompt)


@pytest.mark.parametrize("group,option", [(g, o) for g in GROUPS for o in group_options(g)])
def test_every_option_composes_and_validates(group, option, tmp_path, tiny_rewards):
    cfg = compose(valid_overrides(group, option, tmp_path, tiny_rewards))
    OmegaConf.resolve(cfg)
    assert cfg[group if group != "experiment" else "trainer"] is not None
    if evaluation_only(cfg):
        with pytest.raises(ConfigError, match="cannot be trained on"):
            validate(cfg)
        cfg = compose(
            [
                "eval.every=1",
                f"+reward@eval.rewards.scored_{option}={option}",  # a name of its own (the demo has a diversity)
                *tiny_reward_overrides(tiny_rewards, option, f"eval.rewards.scored_{option}"),
            ]
        )
    validate(cfg)


@pytest.mark.parametrize("method,reward", itertools.product(group_options("method"), group_options("reward")))
def test_every_method_reward_pair_composes(method, reward, tiny_rewards):
    cfg = compose([f"method={method}", f"reward={reward}", *tiny_reward_overrides(tiny_rewards, reward)])
    assert cfg.method.name == method
    if evaluation_only(cfg):
        with pytest.raises(ConfigError, match="cannot be trained on"):  # an evaluation metric (eval.rewards)
            validate(cfg)
        return
    if (
        get_class(cfg.method._target_).requires_differentiable_reward
        and not get_class(cfg.reward._target_).differentiable
    ):
        with pytest.raises(ConfigError, match=f"method={method} needs a differentiable reward"):  # rejected up front
            validate(cfg)
        return
    validate(cfg)


#: the model options of the method x model matrix: every family, real and tiny, less the options that only change a
#: twin's weights (tests/families.py WEIGHT_VARIANTS: composed and validated with each group option above)
MATRIX_MODELS = [m for m in group_options("model") if m not in WEIGHT_VARIANTS]


@pytest.mark.parametrize("method,model", itertools.product(group_options("method"), MATRIX_MODELS))
def test_every_method_model_pair_composes(method, model):
    """The composition matrix over model families (real and tiny): every method composes and validates with every
    model option, without building anything."""
    cfg = compose([f"method={method}", f"model={model}", *real_family_overrides([f"model={model}"])])
    assert cfg.model.name == model and cfg.model.finetune in ("lora", "full")
    validate(cfg)


def test_method_yaml_values_reach_the_config():
    """The CPU demo's budget (conf/budget/cpu_demo.yaml, picked by the tiny twin) overrides only scale knobs; method
    semantics come from the method YAML."""
    dance, flow, fast = (compose([f"method={m}"]).method for m in ("dance_grpo", "flow_grpo", "flow_grpo_fast"))
    assert (dance.noise_kernel, dance.eta, dance.schedule, dance.advantage) == ("dance", 0.3, "linear_shift", "group")
    assert dance.quantize_timestep and dance.init_same_noise and dance.decode == "pred_x0" and dance.kl_beta == 0
    assert (flow.noise_kernel, flow.eta, flow.schedule, flow.advantage) == ("flow", 0.7, "scheduler", "prompt")
    assert flow.timestep_fraction == 0.99 and flow.kl_beta == 0.04 and flow.clip_range == 1e-4
    assert (fast.window_size, list(fast.window_range), fast.clip_range, fast.kl_beta) == (2, [0, 5], 1e-5, 0.0)
    assert dance.group_size == 8 and dance.sampling_steps == 10  # the CPU demo's budget


# ---------------------------------------------------------------------------------------- fail fast, clearly
class DifferentiableOnlyMethod(GRPO):
    requires_differentiable_reward = True


BAD = [
    (["method.clip_range=-0.1"], "method.clip_range"),
    (["method.clip_range=0"], "method.clip_range"),
    (["method.group_size=1"], "method.group_size"),
    (["method=flow_grpo_fast", "method.window_range=[0,12]"], "method.window_range"),
    (["method=flow_grpo_fast", "method.window_size=4", "method.window_range=[2,5]"], "method.window_range"),
    (["method.updates_per_rollout=3"], "method.updates_per_rollout"),
    (["method.rollout_chunk=0"], "method.rollout_chunk"),
    (["experiment=toy_eam", "method.decode_chunk=0"], "method.decode_chunk"),
    (["data=file", "data.path=/nonexistent/prompts.txt"], "data.path"),
    (["data=file"], "data.path"),
    (["data.prompts=[a photo of a cat]"], "reward=color"),
    (["reward=jpeg", f"method._target_={__name__}.DifferentiableOnlyMethod"], "differentiable"),
    (["trainer.steps=0"], "trainer.steps"),
    (["optimizer.lr=-1"], "optimizer.lr"),
]


@pytest.mark.parametrize("overrides,key", BAD, ids=[k + ":" + ",".join(o) for o, k in BAD])
def test_bad_values_fail_before_any_model_is_built(overrides, key, no_model_building, tmp_path):
    cfg = compose(overrides)
    with pytest.raises(ConfigError) as err:
        Trainer(cfg, RunInfo(run_dir=tmp_path))
    assert key in str(err.value)
    assert "Fix" in str(err.value) or "must" in str(err.value)


def enum_fields(group: str, option: str) -> list[tuple[str, list[str]]]:
    """``(key, valid values)`` of every mode (Enum-typed field) of ``<group>=<option>``'s config."""
    schema = OmegaConf.get_type(compose([f"{group}={option}"])[group])
    hints = typing.get_type_hints(schema)
    return [
        (f"{group}.{f.name}", [m.value for m in hints[f.name]])
        for f in dataclasses.fields(schema)
        if isinstance(hints[f.name], type) and issubclass(hints[f.name], enum.Enum)
    ]


MODES = [
    (group, option, key, valid)
    for group in ("method", "model", "reward", "logger")
    for option in group_options(group)
    for key, valid in enum_fields(group, option)
]


@pytest.mark.parametrize("group,option,key,valid", MODES, ids=[f"{g}={o}:{k}" for g, o, k, _ in MODES])
def test_an_unknown_mode_fails_at_composition_listing_the_valid_values(group, option, key, valid):
    with pytest.raises(ConfigCompositionException) as err:
        compose([f"{group}={option}", f"{key}=no_such_mode"])
    message = str(err.value) + str(err.value.__cause__)
    assert key in message and all(v in message for v in valid), message


def test_unknown_option_and_key_fail_at_composition():
    with pytest.raises(MissingConfigException, match="method/no_such_method"):
        compose(["method=no_such_method"])
    with pytest.raises(ConfigCompositionException):
        compose(["method.no_such_key=1"])
    with pytest.raises(ConfigCompositionException):
        compose(["method.group_size=many"])


def test_composition_imports_neither_torch_nor_diffusers():
    """`rewardflow --cfg job` and `--help` compose configs only: every config module stays light, so the CLI answers
    (and the preemption handler is installed) before the slow imports."""
    code = (
        "import sys; from launcher.cli import main; from conftest import compose, group_options; "
        f"[compose([f'{{g}}={{o}}']) for g in {GROUPS!r} for o in group_options(g)]; "
        "heavy = [m for m in ('torch', 'diffusers', 'transformers') if m in sys.modules]; "
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT / "tests", capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_jsonl_prompt_file_and_field(tmp_path, no_model_building):
    f = tmp_path / "p.jsonl"
    f.write_text('{"text": "a red square"}\n{"text": "a blue sky"}\n')
    cfg = compose(["data=file", f"data.path={f}", "data.field=text", "eval.every=0"])  # no evaluation: both trained on
    assert validate(cfg) == ["a red square", "a blue sky"]
    with pytest.raises(ConfigError, match="data.field"):
        validate(compose(["data=file", f"data.path={f}"]))


@pytest.mark.parametrize(
    "args,key", [(["method.clip_range=-1"], "method.clip_range"), (["method=nope"], "method/nope")]
)
def test_cli_reports_a_message_not_a_traceback(args, key, tmp_path):
    proc = subprocess.run(
        [*rewardflow_cmd(), *args, f"hydra.run.dir={tmp_path}"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode != 0
    assert key in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("method,expected", [("flow_grpo", True), ("flow_grpo_fast", True), ("dance_grpo", False)])
def test_flow_grpo_presets_normalise_by_the_global_std(method, expected):
    """Flow-GRPO and its Fast variant divide the prompt advantages by the std of all the step's rewards, as upstream's
    config/base.py (`sample.global_std = True`) and every SD3.5 config do; DanceGRPO's group advantage has no global std
    (docs/methods/grpo_baselines.md#advantages). Read from what `rewardflow --cfg job` prints, the user's view."""
    proc = subprocess.run(
        [*rewardflow_cmd(), f"method={method}", "--cfg", "job"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    method_cfg = OmegaConf.create(proc.stdout).method
    assert (method_cfg.name, method_cfg.global_std) == (method, expected)
