"""Every bad input of issue 26 (item 8) is a config error found before anything is built: one message naming the key
(or the environment variable) and the fix or the valid range (docs/configuration.md#trainer-and-optimizer-keys)."""

from __future__ import annotations

import os
import subprocess

import pytest

from conftest import ROOT, compose, rewardflow_cmd
from launcher.cluster.env_check import check_environment
from launcher.validate import validate
from rewardflow.errors import ConfigError, ConfigErrors
from rewardflow.prompts import load_prompts

SMOKE = ["experiment=smoke", "logger=none"]


@pytest.mark.parametrize(
    "overrides,key,says",
    [
        (["trainer.threads=-1"], "trainer.threads", "0 = auto"),
        (["trainer.seed=-1"], "trainer.seed", "0 <= seed < 2**63"),
        ([f"trainer.seed={2**63}"], "trainer.seed", "0 <= seed < 2**63"),
        (
            ["trainer.sample_every=5", "trainer.num_sample_images=0"],
            "trainer.num_sample_images",
            "trainer.sample_every=0",
        ),
        (["trainer.num_sample_images=-1"], "trainer.num_sample_images", ">= 0"),
        (["trainer.ckpt_every=-5"], "trainer.ckpt_every", "0 = checkpoint only at the end"),
        (["trainer.keep_last_ckpts=-1"], "trainer.keep_last_ckpts", ">= 1"),
        (["trainer.keep_last_ckpts=0"], "trainer.keep_last_ckpts", ">= 1"),
        (["optimizer.betas=[0.9,1.0]"], "optimizer.betas", "[0, 1)"),
        (["optimizer.betas=[-0.1,0.999]"], "optimizer.betas", "[0, 1)"),
        (["optimizer.betas=[0.9]"], "optimizer.betas", "two numbers"),
        (["optimizer.eps=0"], "optimizer.eps", "> 0"),
        (["optimizer.eps=nan"], "optimizer.eps", "finite"),
        (["optimizer.weight_decay=-0.1"], "optimizer.weight_decay", ">= 0"),
        (["optimizer.weight_decay=inf"], "optimizer.weight_decay", "finite"),
        (["model.prompt_cache_size=-1"], "model.prompt_cache_size", "0 = none"),
        (["model.prompt_cache_gib=-1"], "model.prompt_cache_gib", "0 = none"),
        (["model.lora_alpha=nan"], "model.lora_alpha", "finite"),
        (["model.lora_alpha=-8"], "model.lora_alpha", "> 0"),
        (["model.lora_rank=0"], "model.lora_rank", ">= 1"),
        (["model=toy_gaussian", "model.lora_alpha=inf"], "model.lora_alpha", "finite"),
        (["model._target_=rewards.color.ColorReward"], "model._target_", "is not a model component"),
        (["reward._target_=models.tiny_sd3.TinySD3Backbone"], "reward._target_", "is not a reward component"),
        (["cluster=local_multi", "cluster.tasks_per_node=3"], "method.prompts_per_step", "divisible by the 3 ranks"),
        (["cluster=local_multi", "cluster.tasks_per_node=0"], "cluster.tasks_per_node", ">= 1"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_a_value_out_of_range_names_the_key_and_the_fix(overrides, key, says):
    with pytest.raises(ConfigError) as e:
        validate(compose([*SMOKE, *overrides]))
    message = str(e.value)
    assert message.startswith(key) or f"- {key}" in message, message
    assert says in message and "Fix" in message, message


@pytest.mark.parametrize(
    "overrides", [["trainer.seed=1000000000000"], [f"trainer.seed={2**63 - 1}"], ["trainer.num_sample_images=0"]]
)
def test_values_in_range_pass(overrides):
    validate(compose([*SMOKE, *overrides]))  # smoke: trainer.sample_every=0, so no grid needs an image


def test_step_seeds_of_any_valid_seed_are_torch_seeds():
    import torch

    from launcher.train.trainer import step_seed

    for seed in (0, 10**12, 2**63 - 1):
        torch.Generator().manual_seed(step_seed(seed, 10**6, 7))
    assert step_seed(3, 5, 1) == (3 * 1_000_003 + 5) * 1_009 + 1  # small seeds draw the noise they always drew


# -------------------------------------------------------------------------------------------------- prompt files
@pytest.fixture
def prompt_paths(tmp_path):
    (tmp_path / "folder.txt").mkdir()
    (tmp_path / "loop.txt").symlink_to(tmp_path / "loop.txt")
    os.mkfifo(tmp_path / "fifo.txt")
    (tmp_path / "null.jsonl").write_text('{"prompt": "a red square"}\n{"prompt": null}\n')
    (tmp_path / "nested.jsonl").write_text('{"prompt": {"text": "a red square"}}\n')
    (tmp_path / "list.jsonl").write_text('\n{"prompt": "a"}\n\n{"prompt": ["a", "b"]}\n')
    return tmp_path


@pytest.mark.parametrize(
    "name,says",
    [
        ("folder.txt", "is a folder"),
        ("loop.txt", "is a symlink loop"),
        ("fifo.txt", "is a FIFO"),
        ("null.jsonl", "line 2: 'prompt' is null, not a string"),
        ("nested.jsonl", "line 1: 'prompt' is an object, not a string"),
        ("list.jsonl", "line 4: 'prompt' is a list, not a string"),
    ],
)
def test_a_prompt_file_that_cannot_be_read_says_what_it_is(prompt_paths, name, says):
    with pytest.raises(ConfigError) as e:
        load_prompts(None, str(prompt_paths / name))
    message = str(e.value)
    assert message.startswith("data.path=") and says in message and "Fix" in message, message
    assert "no such file" not in message


def test_a_null_prompt_fails_validation(prompt_paths):
    with pytest.raises(ConfigError, match="line 2: 'prompt' is null"):
        validate(compose([*SMOKE, "data=file", f"data.path={prompt_paths / 'null.jsonl'}"]))


# --------------------------------------------------------------------------------------------------- environment
@pytest.mark.parametrize(
    "env,overrides,name",
    [
        ({"WANDB_MODE": "garbage"}, ["logger=wandb"], "WANDB_MODE"),
        ({"WANDB_MODE": ""}, ["logger=wandb"], "WANDB_MODE"),
        ({"SLURM_RESTART_COUNT": "abc"}, [], "SLURM_RESTART_COUNT"),
        ({"SLURM_CPUS_PER_TASK": "abc"}, ["trainer.threads=0"], "SLURM_CPUS_PER_TASK"),
        ({"SLURM_CPUS_PER_TASK": "0"}, ["trainer.threads=0"], "SLURM_CPUS_PER_TASK"),
        ({"REWARDFLOW_CACHE": "<file>"}, [], "REWARDFLOW_CACHE"),
        ({"REWARDFLOW_CACHE": "<file>/below"}, [], "REWARDFLOW_CACHE"),
    ],
    ids=lambda v: None,
)
def test_an_environment_value_that_cannot_be_used_names_the_variable(env, overrides, name, tmp_path):
    file = tmp_path / "a-file"
    file.write_text("not a folder")
    env = {k: v.replace("<file>", str(file)) for k, v in env.items()}
    errors = ConfigErrors()
    check_environment(_typed(compose([*SMOKE, *overrides])), errors, env)
    (message,) = errors.messages
    assert message.startswith(f"environment {name}: ") and "Fix" in message, message


def test_environment_values_in_range_pass(tmp_path):
    env = {
        "WANDB_MODE": "offline",
        "SLURM_RESTART_COUNT": "2",
        "SLURM_CPUS_PER_TASK": "4",
        "REWARDFLOW_CACHE": str(tmp_path / "new" / "cache"),
    }
    errors = ConfigErrors()
    check_environment(_typed(compose([*SMOKE, "logger=wandb"])), errors, env)
    assert not errors.messages
    # SLURM_CPUS_PER_TASK is read only when trainer.threads=0 picks the threads
    check_environment(_typed(compose([*SMOKE, "trainer.threads=2"])), errors, {"SLURM_CPUS_PER_TASK": "abc"})
    assert not errors.messages


def test_validate_reads_the_environment(monkeypatch):
    monkeypatch.setenv("SLURM_RESTART_COUNT", "abc")
    with pytest.raises(ConfigError, match="environment SLURM_RESTART_COUNT"):
        validate(compose(SMOKE))


def _typed(cfg):
    from omegaconf import OmegaConf

    return OmegaConf.to_object(cfg)


# ----------------------------------------------------------------------------------------------------------- CLI
def test_the_command_line_exits_2_with_one_message(tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [*rewardflow_cmd(), *SMOKE, "trainer.keep_last_ckpts=0", "optimizer.eps=0", f"hydra.run.dir={run_dir}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "SLURM_CPUS_PER_TASK": "abc"},
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    for key in ("trainer.keep_last_ckpts", "optimizer.eps", "3 config errors", "environment SLURM_CPUS_PER_TASK"):
        assert key in proc.stderr, proc.stderr[-3000:]
    assert not (run_dir / "metrics.jsonl").exists()


def test_a_bad_slurm_restart_count_is_reported_before_the_run_dir_is_locked(tmp_path):
    """The command line locks a local run's dir (reading SLURM_RESTART_COUNT) before the config checks run."""
    proc = subprocess.run(
        [*rewardflow_cmd(), *SMOKE, f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "SLURM_RESTART_COUNT": "abc"},
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "environment SLURM_RESTART_COUNT: 'abc'" in proc.stderr, proc.stderr


def test_a_prompt_longer_than_any_text_context_is_cut_once_at_load(tmp_path, caplog):
    """A 10 MB one-line prompt (266 s and 5.5 GB for two steps before) is cut at load with one warning, however
    often the list is read (the config check, the prompt source and the evaluation read it)."""
    from rewardflow.prompts import MAX_PROMPT_CHARS

    path = tmp_path / "long.txt"
    path.write_text("a red square\n" + "a very long prompt " * 600_000 + "\nblue\n")
    with caplog.at_level("WARNING", logger="rewardflow.prompts"):
        first = load_prompts(None, str(path))
        again = load_prompts(None, str(path))
    assert first == again and [len(p) for p in first] == [12, MAX_PROMPT_CHARS, 4]
    assert first[1] == ("a very long prompt " * 600_000).strip()[:MAX_PROMPT_CHARS]
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "number 2" in warnings[0] and "11399999 characters" in warnings[0], warnings
