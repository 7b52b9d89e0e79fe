"""EMA of the weights and learning-rate schedules (docs/evaluation.md#tested-invariants): the EMA is the exponential
average (float64), swapping it in and out restores the trained weights bitwise, the schedules follow their closed
forms, and a resumed run continues both bitwise (weights, averages, learning rates, EMA evaluations, export)."""

from __future__ import annotations

import json
import math

import pytest
import torch
from omegaconf import OmegaConf

from conftest import compose
from launcher.train.ema import ParameterEMA
from launcher.train.lr_schedule import build_lr_schedule
from launcher.train.trainer import RunInfo, Trainer


def lrs(name: str, warmup: int, steps: int, lr: float = 0.1) -> list[float]:
    """The learning rate of each of ``steps`` trainer steps under schedule ``name``."""
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=lr)
    sched = build_lr_schedule(opt, OmegaConf.create({"scheduler": name, "warmup_steps": warmup}), steps)
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def test_lr_schedules_follow_their_closed_forms():
    steps, warmup, lr = 12, 3, 0.1
    assert lrs("constant", 0, steps) == [lr] * steps
    ramp = [lr * (s + 1) / (warmup + 1) for s in range(warmup)]
    assert lrs("warmup_constant", warmup, steps) == pytest.approx(ramp + [lr] * (steps - warmup), rel=1e-12)
    cosine = [0.5 * lr * (1 + math.cos(math.pi * (s - warmup) / (steps - warmup))) for s in range(warmup, steps)]
    assert lrs("warmup_cosine", warmup, steps) == pytest.approx(ramp + cosine, rel=1e-12, abs=1e-15)


def test_ema_is_the_exponential_average_and_applying_it_restores_the_weights_bitwise(float64):
    model = torch.nn.Linear(3, 2)
    params = list(model.parameters())
    decay = 0.8
    ema = ParameterEMA(model, params, decay)
    assert ema.names == ["weight", "bias"]
    history = [[p.detach().clone() for p in params]]
    g = torch.Generator().manual_seed(0)
    for _ in range(5):
        with torch.no_grad():
            for p in params:
                p.add_(torch.randn(p.shape, generator=g))
        history.append([p.detach().clone() for p in params])
        ema.update()
    for i, avg in enumerate(ema.averages):
        # ema_k = decay^k w_0 + (1 - decay) sum_{j=1..k} decay^(k-j) w_j
        k = len(history) - 1
        expected = decay**k * history[0][i] + sum(
            (1 - decay) * decay ** (k - j) * history[j][i] for j in range(1, k + 1)
        )
        torch.testing.assert_close(avg, expected, rtol=1e-13, atol=1e-13)
    trained = [p.detach().clone() for p in params]
    with ema.applied():
        assert all(torch.equal(p, a) for p, a in zip(params, ema.averages))
    assert all(torch.equal(p, t) for p, t in zip(params, trained))


def test_ema_warmup_ramps_the_decay_as_flow_grpo_ema(float64):
    """``trainer.ema_warmup``: the s-th update uses min((1 + s) / (10 + s), decay) (flow_grpo/ema.py's
    get_current_decay; DiffusionNFT's EMA at decay 0.9, docs/methods/diffusion_nft.md#evaluation-with-the-ema), so the
    average follows the first updates closely; the count is part of the state and comes back on load."""
    model = torch.nn.Linear(2, 1)
    params = list(model.parameters())
    ema = ParameterEMA(model, params, 0.9, warmup=True)
    expected_avg = [p.detach().clone() for p in params]
    g = torch.Generator().manual_seed(1)
    decays = []
    for _ in range(100):
        with torch.no_grad():
            for p in params:
                p.add_(torch.randn(p.shape, generator=g))
        d = ema.current_decay()
        decays.append(d)
        ema.update()
        expected_avg = [d * a + (1 - d) * p.detach() for a, p in zip(expected_avg, params)]
    assert decays[:3] == pytest.approx([2 / 11, 3 / 12, 4 / 13], rel=1e-15)
    assert decays[79] == pytest.approx(0.9) and decays[99] == 0.9  # (1 + s) / (10 + s) reaches 0.9 at s = 80
    for avg, ref in zip(ema.averages, expected_avg):
        torch.testing.assert_close(avg, ref, rtol=1e-13, atol=1e-13)
    state = {k: v.clone() for k, v in ema.state_dict().items()}
    fresh = ParameterEMA(model, params, 0.9, warmup=True)
    fresh.load_state_dict(state)
    assert int(fresh.updates) == 100 and fresh.current_decay() == 0.9
    assert "__ema_updates__" not in ParameterEMA(model, params, 0.9).state_dict()  # plain EMA: the earlier layout


@pytest.mark.parametrize("preset", ["nft_sd35m", "nft_flux"])
def test_diffusion_nft_presets_evaluate_and_export_the_ema_as_nvlabs(preset):
    """NVlabs/DiffusionNFT evaluates and saves the EMA of the adapter (decay 0.9 with flow_grpo/ema.py's warmup, every
    optimizer step); the presets do the same."""
    cfg = compose([f"experiment={preset}", "model.path=/ckpt/x", "data.path=/tmp/p.txt"])
    t = cfg.trainer
    assert (t.ema_decay, t.ema_warmup, t.export_ema, cfg.eval.use_ema) == (0.9, True, True, True)


EMA_RUN = [
    "experiment=smoke",
    "logger=none",
    "trainer.steps=6",
    "trainer.ckpt_every=2",
    "trainer.ema_decay=0.7",
    "trainer.ema_warmup=true",  # the ramp's update count resumes with the averages (DiffusionNFT's presets use it)
    "optimizer.scheduler=warmup_cosine",
    "optimizer.warmup_steps=2",
    "eval.every=2",
    "eval.samples_per_prompt=1",
    "~reward@eval.rewards.diversity",  # it compares a prompt's samples: 2 or more
    "eval.use_ema=true",
    "trainer.export_ema=true",
]


def _rows(run_dir):
    return [
        {k: v for k, v in json.loads(l).items() if not k.startswith("time/")}
        for l in (run_dir / "metrics.jsonl").read_text().splitlines()
    ]


class Crash(RuntimeError):
    pass


@pytest.fixture(scope="module")
def ema_reference(tmp_path_factory):
    """One uninterrupted run with an EMA, a warmup-cosine schedule and EMA evaluations: (trainer, run dir)."""
    run_dir = tmp_path_factory.mktemp("ema_reference")
    trainer = Trainer(compose(EMA_RUN), RunInfo(run_dir=run_dir))
    trainer.fit()
    return trainer, run_dir


def test_ema_and_schedule_resume_bitwise_and_the_export_writes_the_ema(ema_reference, tmp_path):
    from safetensors.torch import load_file

    ref, ref_dir = ema_reference
    rows = _rows(ref_dir)
    lr = [r["lr"] for r in rows if "lr" in r]
    assert lr[0] < lr[1] < lr[2] > lr[3] > lr[4] > lr[5] > 0  # warmup, then the cosine
    exported = load_file(str(next((ref_dir / "export" / "transformer").glob("*.safetensors"))))
    for name, avg in zip(ref.ema.names, ref.ema.averages):
        assert torch.equal(exported[name], avg), name  # the export holds the EMA weights

    cfg = compose(EMA_RUN)
    broken = Trainer(cfg, RunInfo(run_dir=tmp_path))
    original = broken.train_step

    def crash_after_4(step):
        out = original(step)
        if step == 4:  # last checkpoint after step 3
            raise Crash("simulated node failure")
        return out

    broken.train_step = crash_after_4
    with pytest.raises(Crash):
        broken.fit()
    resumed = Trainer(cfg, RunInfo(run_dir=tmp_path))
    assert resumed.start_step == 4 and resumed.lr_schedule.last_epoch == 4
    resumed.fit()
    assert _rows(tmp_path) == rows  # lr, losses and EMA evaluations
    for name, avg in ref.ema.state_dict().items():
        assert torch.equal(resumed.ema.state_dict()[name], avg), name
    # the warmup goes on where it stopped: one count per optimizer update, two a step here (6 steps)
    assert int(resumed.ema.updates) == int(ref.ema.updates) == 12
    assert resumed.lr_schedule.state_dict() == ref.lr_schedule.state_dict()


def test_evaluating_the_ema_changes_the_scores_not_the_training(ema_reference, tmp_path):
    _, ref_dir = ema_reference
    Trainer(compose([*EMA_RUN, "eval.use_ema=false"]), RunInfo(run_dir=tmp_path)).fit()
    ema, raw = _rows(ref_dir), _rows(tmp_path)
    assert [r for r in ema if "reward/mean" in r] == [r for r in raw if "reward/mean" in r]
    ema_evals, raw_evals = [r for r in ema if "eval/color/mean" in r], [r for r in raw if "eval/color/mean" in r]
    assert ema_evals[0] == raw_evals[0]  # the EMA starts at the base weights
    assert all(a["eval/color/mean"] != b["eval/color/mean"] for a, b in zip(ema_evals[1:], raw_evals[1:]))
