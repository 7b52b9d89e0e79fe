"""The held-out evaluation (docs/evaluation.md#tested-invariants): one ruler for every method (the base model scores
bit-identically whatever the method and seed), evaluation never changes training, two runs evaluate identically,
and a resumed run evaluates every point exactly once."""

from __future__ import annotations

import json
import re

import pytest
import torch
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from conftest import compose, group_options
from launcher.train.trainer import RunInfo, Trainer
from launcher.validate import validate
from rewardflow.errors import ConfigError

# smoke scale (2 prompts x 2 generations, 6 sampling steps) with the demo's held-out evaluation every 2 steps, one
# sample per prompt (so without the default diversity score, which compares a prompt's samples)
SMOKE = [
    "experiment=smoke",
    "logger=none",
    "trainer.export=false",
    "eval.every=2",
    "eval.samples_per_prompt=1",
    "~reward@eval.rewards.diversity",
]
METHODS = group_options("method")  # every method option, the worked examples of docs/extending.md included


def rows(run_dir, kind):
    """metrics.jsonl rows of one kind (``eval`` or ``train``) without the timings, which differ run to run."""
    out = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if any(k.startswith("eval/") for k in row) == (kind == "eval"):
            out.append({k: v for k, v in row.items() if not k.startswith("time/")})
    return out


def test_every_method_and_seed_evaluates_the_base_model_bit_identically(tmp_path):
    """Item 5 of issue 15: each method is built and evaluated before its first update; the step-0 scores and the
    step-0 image grid are the same bits (same base model, same prompts, same noise, same sampler)."""
    results = {}
    for method in [*METHODS, "dance_grpo seed 7"]:
        name, *seed = method.split(" seed ")
        cfg = compose([*SMOKE, f"method={name}", f"trainer.seed={seed[0] if seed else 0}", "trainer.steps=1"])
        trainer = Trainer(cfg, RunInfo(run_dir=tmp_path / method.replace(" ", "_")))
        row = trainer.evaluator.maybe_run(0, 0.0)
        grid = (tmp_path / method.replace(" ", "_") / "samples" / "eval_00000.png").read_bytes()
        results[method] = ({k: v for k, v in row.items() if k.startswith("eval/")}, grid)
    (ref_scores, ref_grid), *_ = results.values()
    assert set(ref_scores) == {f"eval/{r}/{s}" for r in ("color", "brightness") for s in ("mean", "std")}
    assert 0 < ref_scores["eval/color/mean"] < 1
    for method, (scores, grid) in results.items():
        assert scores == ref_scores, method  # float equality: bit-identical
        assert grid == ref_grid, method


# evaluated every 2 steps, checkpointed every 2, with a second reward scored at evaluation
RUN = [*SMOKE, "trainer.steps=6", "trainer.ckpt_every=2", "+reward@eval.rewards.jpeg=jpeg"]


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    """One uninterrupted evaluated run, shared by the tests below: (its trainer, its run dir)."""
    run_dir = tmp_path_factory.mktemp("evaluated")
    trainer = Trainer(compose(RUN), RunInfo(run_dir=run_dir))
    trainer.fit()
    return trainer, run_dir


def test_evaluation_does_not_change_training_and_is_deterministic(evaluated, tmp_path):
    """The training rows (every metric but the timings) and the final weights of a run evaluated every 2 steps
    equal those of the same run without evaluation, step for step; two evaluated runs log identical eval/* rows."""
    trainer, run_dir = evaluated
    plain = Trainer(compose([*RUN, "eval.every=0"]), RunInfo(run_dir=tmp_path / "plain"))
    plain.fit()
    assert rows(run_dir, "train") == rows(tmp_path / "plain", "train")
    assert len(rows(tmp_path / "plain", "train")) == 6 and not rows(tmp_path / "plain", "eval")
    evaluated_params = dict(trainer.backbone.transformer.named_parameters())
    for name, p in plain.backbone.transformer.named_parameters():
        assert torch.equal(p, evaluated_params[name]), name

    Trainer(compose(RUN), RunInfo(run_dir=tmp_path / "again")).fit()
    first, second = rows(run_dir, "eval"), rows(tmp_path / "again", "eval")
    assert [r["step"] for r in first] == [0, 2, 4, 6]  # step 0, every 2 steps, the end
    assert first == second  # deterministic, bit for bit
    assert {"eval/color/mean", "eval/color/std", "eval/jpeg/mean", "eval/jpeg/std"} <= set(first[0])
    assert first[-1]["eval/color/mean"] != first[0]["eval/color/mean"]  # the model did change
    grids = sorted(p.name for p in (run_dir / "samples").glob("eval_*.png"))
    assert grids == ["eval_00000.png", "eval_00002.png", "eval_00004.png", "eval_00006.png"]


def test_evaluation_time_stays_out_of_the_compute_axes(evaluated):
    _, run_dir = evaluated
    all_rows = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
    wall = {r["step"]: r["time/wallclock_s"] for r in all_rows if "reward/mean" in r}
    evals = [r for r in all_rows if "eval/color/mean" in r]
    assert all(r["time/eval_s"] > 0 for r in evals)
    # evaluation k is of the model after k steps: its compute is that of steps 0..k-1, never the evaluation's own
    assert [r["time/eval_wallclock_s"] for r in evals] == [0.0, wall[1], wall[3], wall[5]]
    assert [r["time/eval_gpu_hours"] for r in evals] == [0.0, wall[1] / 3600, wall[3] / 3600, wall[5] / 3600]
    assert not any("time/wallclock_s" in r or "time/gpu_hours" in r for r in evals)  # keys of their own (W&B merges)


def test_every_evaluation_sits_at_its_own_compute_in_wandb_and_in_compare(tmp_path):
    """Issue 25 item 2: W&B merges an evaluation into the training row of its step, and so did rewardflow-compare
    (last write wins), which put the base model at the end of step 0. The W&B offline history and compare's curve
    place every evaluation where metrics.jsonl does: the base model at 0, evaluation k at the compute of steps
    0..k-1, and on the step axis after k steps."""
    from launcher.compare.cli import main as compare
    from launcher.tracking.wandb_offline import find_offline_runs, read_offline_run

    run_dir = tmp_path / "run"
    overrides = [*RUN, "logger=wandb", "logger.mode=offline", "trainer.ckpt_every=0"]
    cfg = compose(overrides)
    (run_dir / ".hydra").mkdir(parents=True)
    OmegaConf.save(cfg, run_dir / ".hydra" / "config.yaml")  # as the command line does: compare groups by method
    Trainer(cfg, RunInfo(run_dir=run_dir)).fit()
    lines = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
    wall = {r["step"]: r["time/wallclock_s"] for r in lines if "reward/mean" in r}
    expected = [0.0, wall[1], wall[3], wall[5]]
    assert [r["time/eval_wallclock_s"] for r in lines if "eval/color/mean" in r] == expected

    (offline,) = find_offline_runs(run_dir)
    history = [r for r in read_offline_run(offline).history if "eval/color/mean" in r]
    assert [r["step"] for r in history] == [0, 2, 4, 6]
    assert [r["time/eval_wallclock_s"] for r in history] == expected
    # the merged W&B rows also hold the training compute after steps 0, 2, 4: the evaluation is not read from it
    assert [r.get("time/wallclock_s") for r in history[:3]] == [wall[0], wall[2], wall[4]]

    for source in ("jsonl", "wandb"):
        out = tmp_path / f"compare-{source}"
        argv = [str(run_dir), "--source", source, "--metric", "eval/color/mean", "--axis", "wallclock_s"]
        assert compare([*argv, "--out", str(out), "--min-seeds", "1", "--min-points", "1"]) == 0
        (group,) = json.loads((out / "comparison.json").read_text())["groups"]
        (trace,) = group["runs"]
        assert trace["x"]["wallclock_s"] == pytest.approx(expected, rel=1e-6), source
        assert trace["x"]["step"] == [0, 2, 4, 6] and trace["total"]["step"] == 6, source  # after 6 steps, not 7


class Crash(RuntimeError):
    pass


@pytest.mark.parametrize("when", ["before_evaluation", "after_evaluation"])
def test_a_resumed_run_evaluates_every_point_once(evaluated, tmp_path, when):
    """Crash just before evaluation 4 (after step 3's checkpoint) or just after it (before step 4 trains): the
    resumed run's metrics.jsonl equals the uninterrupted run's, each evaluation point exactly once."""
    _, ref_dir = evaluated
    cfg = compose(RUN)
    broken = Trainer(cfg, RunInfo(run_dir=tmp_path))
    if when == "before_evaluation":
        original = broken.evaluator.maybe_run

        def crash(step, wallclock_s):
            if step == 4:
                raise Crash("simulated node failure")
            return original(step, wallclock_s)

        broken.evaluator.maybe_run = crash
    else:
        original = broken.train_step

        def crash(step):
            if step == 4:
                raise Crash("simulated node failure")
            return original(step)

        broken.train_step = crash
    with pytest.raises(Crash):
        broken.fit()
    logged = [r["step"] for r in rows(tmp_path, "eval")]
    assert logged == ([0, 2] if when == "before_evaluation" else [0, 2, 4])

    resumed = Trainer(cfg, RunInfo(run_dir=tmp_path))
    assert resumed.start_step == 4
    resumed.fit()
    assert rows(tmp_path, "eval") == rows(ref_dir, "eval")
    assert rows(tmp_path, "train") == rows(ref_dir, "train")
    Trainer(cfg, RunInfo(run_dir=tmp_path)).fit()  # a finished run resumed: nothing to redo
    assert [r["step"] for r in rows(tmp_path, "eval")] == [0, 2, 4, 6]


def test_the_split_holds_prompts_out_of_training_whether_or_not_evaluation_is_on(tmp_path):
    from launcher.train.evaluation import held_out_prompts

    data = [f"a {c} square" for c in ("red", "green", "blue", "yellow", "cyan", "magenta", "white", "black")]
    path = tmp_path / "prompts.txt"
    path.write_text("\n".join(data) + "\n")
    common = ["experiment=smoke", "data=file", f"data.path={path}", "eval.split=3"]
    on, off = compose([*common, "eval.every=5"]), compose([*common, "eval.every=0"])
    train_on, train_off = validate(on), validate(off)
    assert train_on == train_off and len(train_on) == 5
    held_out = held_out_prompts(on)
    assert sorted(train_on + held_out) == sorted(data) and not set(train_on) & set(held_out)
    assert held_out == held_out_prompts(compose([*common, "trainer.seed=3"]))  # the same for every seed
    from launcher.train.data import PromptSource
    from launcher.train.data_config import DataConfig

    source = PromptSource(DataConfig(name="file", path=str(path)), seed=1, held_out=3)
    assert sorted(source.batch(0, 5)) == sorted(train_on)  # one epoch of training sees exactly the rest


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["eval.prompts=null", "eval.split=8"], "eval.split=8 holds out every one of the 8 data prompts"),
        (["eval.split=2"], "eval.split: eval.prompts and eval.split=2 both choose"),
        (["eval.prompts=null"], "eval.every: 25 evaluates held-out prompts, and none are set"),
        (["eval.use_ema=true"], "eval.use_ema: true needs an EMA"),
        (["trainer.export_ema=true"], "trainer.export_ema: true needs an EMA"),
        (["trainer.ema_decay=1.0"], "trainer.ema_decay: must be in [0, 1)"),
        (["eval.samples_per_prompt=0"], "eval.samples_per_prompt: must be >= 1"),
        (["eval.sampling_steps=null"], "eval.sampling_steps: is not set and model=tiny_flux"),
        (["eval.prompts=[a photo of a tree]"], "do not suit reward=color"),
        (["+reward@eval.rewards.color=jpeg"], "eval.rewards.color: the name is the trained reward's"),
        (
            ["model=toy_gaussian", "reward=gaussian_tilt", "method=eam", "eval.guidance=2.0"],
            "model=toy_gaussian has no guidance",
        ),
        (["optimizer.warmup_steps=5"], "has no effect with optimizer.scheduler=constant"),
        (["optimizer.scheduler=warmup_constant"], "needs optimizer.warmup_steps >= 1"),
        (["optimizer.scheduler=warmup_cosine", "optimizer.warmup_steps=150"], "leaves no step for the cosine"),
    ],
)
def test_bad_evaluation_ema_and_schedule_settings_are_config_errors(overrides, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        validate(compose(overrides))


def test_an_unknown_lr_schedule_fails_at_composition_listing_the_valid_ones():
    with pytest.raises(ConfigCompositionException) as err:
        compose(["optimizer.scheduler=linear"])
    message = str(err.value) + str(err.value.__cause__)
    assert "optimizer.scheduler" in message and "warmup_cosine" in message, message


def test_a_multi_reward_evaluates_its_raw_weighted_sum_without_touching_training_state():
    from rewards.color import ColorReward
    from rewards.color_config import ColorRewardConfig
    from rewards.jpeg import JpegCompressibility
    from rewards.jpeg_config import JpegRewardConfig
    from rewards.multi import MultiReward
    from rewards.multi_config import MultiRewardConfig

    color, jpeg = ColorReward(ColorRewardConfig()), JpegCompressibility(JpegRewardConfig())
    reward = MultiReward(
        MultiRewardConfig(weights={"color": 1.0, "jpeg": 0.5}, normalize="running"), {"color": color, "jpeg": jpeg}
    )
    images = torch.rand(3, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    prompts = ["a red car", "a blue sky", "a white cat"]
    state = {k: v.clone() for k, v in reward.state_dict().items()}
    scores = reward.evaluate(images, prompts)
    expected = 1.0 * color.score(images, prompts) + 0.5 * jpeg.score(images, prompts)
    torch.testing.assert_close(scores, expected)
    assert all(torch.equal(v, state[k]) for k, v in reward.state_dict().items())  # running statistics untouched
    assert reward.step_metrics() == {}  # nothing logged for training
