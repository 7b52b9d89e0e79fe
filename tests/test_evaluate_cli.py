"""``rewardflow-eval`` (launcher/evaluate_cli.py, docs/evaluation.md#evaluating-without-training): the base model, an
export and a run's checkpoints score, bit for bit on the CPU, what the in-training evaluation logged for the same
weights and noise (issue 28, item 3); its config errors come before torch, naming the key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import CONF, compose
from test_fast_config_errors import HEAVY, imported

# smoke scale, the demo's held-out prompts (1 sample each), evaluated at step 0 and at the end (step 2)
SMOKE = [
    "experiment=smoke",
    "logger=none",
    "eval.samples_per_prompt=1",
    "~reward@eval.rewards.diversity",  # it compares a prompt's samples: 2 or more
    "+reward@eval.rewards.jpeg=jpeg",
]
TRAIN = [*SMOKE, "trainer.steps=2", "eval.every=2", "trainer.ckpt_every=1", "trainer.export=true"]


def eval_rows(run_dir: Path) -> dict[int, dict]:
    """The eval/* scores of each evaluation row of a run's metrics.jsonl, by step."""
    out = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if any(k.startswith("eval/") for k in row):
            out[int(row["step"])] = {k: v for k, v in row.items() if k.startswith("eval/")}
    return out


def test_the_eval_command_scores_base_export_and_checkpoints_as_training_did(tmp_path):
    from launcher.evaluate_cli import RESULTS_FILE
    from launcher.evaluate_cli import run as evaluate
    from launcher.train.trainer import RunInfo, Trainer

    train_dir = tmp_path / "train"
    Trainer(compose(TRAIN), RunInfo(run_dir=train_dir)).fit()
    trained = eval_rows(train_dir)
    assert set(trained) == {0, 2} and set(trained[2]) == {
        f"eval/{r}/{s}" for r in ("color", "brightness", "jpeg") for s in ("mean", "std")
    }
    assert trained[0] != trained[2]  # the two steps changed the weights

    def scored(weights: str, name: str) -> dict:
        out = evaluate(compose([*SMOKE, f"evaluate.weights={weights}"], config_name="evaluate"), tmp_path / name)
        assert json.loads((tmp_path / name / RESULTS_FILE).read_text()) == json.loads(json.dumps(out))
        assert eval_rows(tmp_path / name) == {r["step"]: r["metrics"] for r in out["results"]}  # metrics.jsonl too
        return out

    run = scored(str(train_dir), "run")  # every checkpoint of the run, in step order
    assert [(r["checkpoint_step"], r["step"]) for r in run["results"]] == [(0, 1), (1, 2)]
    assert run["results"][-1]["metrics"] == trained[2]  # float equality: bit for bit
    last = scored(str(train_dir / "checkpoints" / "step_00000001"), "checkpoint")
    assert last["results"][0]["metrics"] == trained[2]
    export = scored(str(train_dir / "export"), "export")
    assert export["results"][0]["weights"] == "export" and export["results"][0]["metrics"] == trained[2]
    base = scored("base", "base")
    assert base["results"][0]["step"] == 0 and base["results"][0]["metrics"] == trained[0]
    assert base["prompts"] == compose(SMOKE).eval.prompts and base["rewards"] == ["color", "brightness", "jpeg"]
    assert (tmp_path / "base" / "samples" / "eval_00000.png").read_bytes() == (
        train_dir / "samples" / "eval_00000.png"
    ).read_bytes()


def test_the_eval_config_takes_the_training_configs_groups():
    train = yaml.safe_load((CONF / "train.yaml").read_text())["defaults"]
    evaluate = yaml.safe_load((CONF / "evaluate.yaml").read_text())["defaults"]
    assert evaluate == ["evaluate_schema", *train[1:]] and train[0] == "train_schema"
    cfg = compose([], config_name="evaluate")  # no overrides: the demo's base model on the demo's held-out prompts
    assert cfg.evaluate.weights == "base" and cfg.model.name == "tiny_flux" and len(cfg.eval.prompts) == 8
    assert cfg.task_name == "evaluate"


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "launcher.evaluate_cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )


@pytest.mark.parametrize(
    "args,key",
    [
        (["evaluate.weights=/nonexistent/run"], "evaluate.weights=/nonexistent/run: no such folder"),
        (["evaluate.weights=."], "is neither an export, a checkpoint nor a run dir"),
        (
            ["data=file", "data.path=prompts.txt", "eval.split=0"],
            "eval.prompts: rewardflow-eval scores held-out prompts",
        ),
        (["eval.use_ema=true", "trainer.ema_decay=0.9"], "eval.use_ema: true scores a checkpoint's EMA weights"),
    ],
)
def test_an_eval_config_error_names_the_key_before_torch(args, key, tmp_path):
    (tmp_path / "prompts.txt").write_text("a red car\n")
    proc = cli(*args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "config error:" in proc.stderr and key in proc.stderr, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert not imported(proc.stderr) & set(HEAVY), "the config error path imported torch or diffusers"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prompts.txt"]  # no run folder


# 5 held-out prompts over 2 ranks (3 and 2, one padded), in batches of 2; one thread per process, as the ranks have
SHARDED = [
    "experiment=smoke",
    "logger=none",
    "trainer.threads=1",
    "eval.samples_per_prompt=1",
    "~reward@eval.rewards.diversity",  # one sample a prompt: no diversity to score
    "eval.batch_size=2",
    "eval.prompts=[a red car,a green flower,a blue circle,a yellow square,a white cat]",
    "+reward@eval.rewards.jpeg=jpeg",
]


def _eval_ranks(rank, world, run_dir):
    from launcher.evaluate_cli import run as evaluate

    cfg = compose(SHARDED, config_name="evaluate")
    # the ranks are spawned here (tests/dist_utils.py), not by submitit: cluster=local with the multi-rank keys
    cfg.cluster = compose(["cluster=local_multi"], config_name="evaluate").cluster
    cfg.cluster.name = "local"
    return evaluate(cfg, run_dir)


@pytest.mark.slow
def test_the_eval_command_shards_prompts_over_two_ranks_and_scores_as_one_process(tmp_path):
    """rewardflow-eval under 2 gloo ranks (FSDP2): each rank samples its share of the (prompt, sample) pairs and
    writes its share of the sample files; eval.json holds, bit for bit, the scores of one process (same weights, same
    noise per pair, each pair's computation the same on either side), and the same sample files."""
    from dist_utils import run_distributed
    from launcher.evaluate_cli import RESULTS_FILE
    from launcher.evaluate_cli import run as evaluate

    single = evaluate(compose(SHARDED, config_name="evaluate"), tmp_path / "single")  # also builds the twin
    ranks = run_distributed(_eval_ranks, 2, tmp_path / "two", timeout=600)
    written = json.loads((tmp_path / "two" / RESULTS_FILE).read_text())
    assert written == json.loads(json.dumps(ranks[0]))  # rank 0 wrote what every rank returns
    assert [r["metrics"] for r in ranks[1]["results"]] == [r["metrics"] for r in ranks[0]["results"]]  # gathered
    assert (single["world_size"], written["world_size"]) == (1, 2)
    assert [r["metrics"] for r in written["results"]] == [r["metrics"] for r in single["results"]]  # float equality
    assert set(single["results"][0]["metrics"]) == {
        f"eval/{r}/{s}" for r in ("color", "brightness", "jpeg") for s in ("mean", "std")
    }
    one, two = (tmp_path / "single" / "samples" / "eval_00000", tmp_path / "two" / "samples" / "eval_00000")
    names = sorted(p.name for p in one.iterdir())
    assert len(names) == 6 and names == sorted(p.name for p in two.iterdir())  # 5 PNGs and samples.jsonl
    assert all((one / n).read_bytes() == (two / n).read_bytes() for n in names)
