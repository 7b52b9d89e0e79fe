"""method=jagg on the tiny FLUX twin: pass counts on the model, parity with the baseline's backward, logged loss,
diagnostics, config validation (docs/methods/jagg.md#tested-invariants, items 7-9;
docs/methods/jagg.md#diagnostic-mode)."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from conftest import compose
from launcher.components import build
from launcher.train.trainer import RunInfo, Trainer
from methods.jagg import JAGG
from rewardflow.errors import ConfigError
from rewardflow.nfe_counter import NFECounter

M_ROWS = 3  # samples per micro-batch


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models run fastest on one thread; on a shared, busy CPU two OpenMP threads can be 30x slower."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="module")
def backbone(one_thread):
    torch.manual_seed(0)
    return build(compose(["model=tiny_flux"]).model, "model", keep_reference=True)


def jagg(backbone, *overrides, steps=9):
    cfg = compose(
        [
            "method=jagg",
            f"method.sampling_steps={steps}",
            f"method.group_size={M_ROWS}",
            "method.prompts_per_step=1",
            *overrides,
        ]
    ).method
    return JAGG(OmegaConf.to_object(cfg), backbone)


def rollout_of(method, seed=0):
    gen = torch.Generator().manual_seed(seed)
    rollout = method.rollout(["a red square"], gen)
    rollout.rewards = torch.rand(len(rollout), generator=gen)
    method.prepare_update(rollout)
    return rollout


def grads_after(method, fn):
    net = method.backbone.transformer
    net.zero_grad(set_to_none=True)
    out = fn()
    return {k: p.grad.clone() for k, p in net.named_parameters() if p.grad is not None}, out


# ------------------------------------------------------------------------------- invariant 7: pass counts
def test_two_backward_rows_per_sample_per_jagg_group_and_w_per_exact_group(backbone, monkeypatch):
    method = jagg(backbone)  # 9 steps: 8 trained = 2 groups of 4, group 0 JAGG
    rollout = rollout_of(method)
    counter = NFECounter(backbone.transformer_modules())
    samples, steps, m = torch.arange(M_ROWS), rollout.train_steps, M_ROWS
    inside = []
    original = method.upstream_gradients

    def watched(*args, **kwargs):  # no transformer backward while computing the s_j
        before = counter.snapshot()
        out = original(*args, **kwargs)
        inside.append(counter.snapshot()[1] - before[1])
        return out

    monkeypatch.setattr(method, "upstream_gradients", watched)

    def delta(fn):
        f0, b0 = counter.snapshot()
        fn()
        f1, b1 = counter.snapshot()
        return f1 - f0, b1 - b0

    args = (rollout, samples, steps[:, 0:4], m * 8, {}, 1 / 8)
    assert delta(lambda: method.jagg_group_backward(*args)) == (4 * m, 2 * m)  # W forwards, 2 backwards
    assert delta(lambda: method.exact_group_backward(*args)) == (4 * m, 4 * m)  # W forwards, W backwards
    assert delta(lambda: method.backward(rollout, samples, m)) == (8 * m, 6 * m)  # 2 + 4 of 8
    assert inside == [0, 0]
    counter.remove()


def test_group_fraction_trains_a_random_subset_of_whole_groups_per_step(backbone):
    method = jagg(backbone, "method.group_fraction=0.5", steps=13)  # 12 steps = 3 groups; 1 trained per step
    counter = NFECounter(backbone.transformer_modules())
    seen = set()
    for seed in range(3):
        rollout = rollout_of(method, seed=seed)
        (group,) = rollout.extras["jagg_groups"].groups
        seen.add(group)
        assert rollout.train_steps.tolist() == [list(range(4 * group, 4 * group + 4))] * M_ROWS
        b0 = counter.snapshot()[1]
        method.backward(rollout, torch.arange(M_ROWS), M_ROWS)
        assert counter.snapshot()[1] - b0 == M_ROWS * (2 if group == 0 else 4)  # group 0 is the JAGG group
    counter.remove()


# ------------------------------------------------------------------------- invariant 9: jagg_frac = 0 parity
@pytest.mark.parametrize("base", ["dance_grpo", "flow_grpo"])
def test_jagg_frac_zero_is_bit_identical_to_the_baseline_backward(backbone, base):
    """Same rollout, same step order: JAGG with jagg_frac=0 runs the baseline's backward op for op (flow_grpo: with
    its KL term, so the reference path too)."""
    method = jagg(backbone, f"method.base={base}", "method.jagg_frac=0")
    rollout = rollout_of(method, seed=1)

    def run(fn):
        for mb in (torch.tensor([0, 1]), torch.tensor([2])):  # two micro-batches accumulate into one update
            fn(rollout, mb, M_ROWS)

    ours, _ = grads_after(method, lambda: run(method.backward))
    baseline, _ = grads_after(method, lambda: run(super(JAGG, method).backward))
    assert ours.keys() == baseline.keys() and ours
    assert all(torch.equal(ours[k], baseline[k]) for k in ours)


# ----------------------------------------------------------------------------- invariant 8: loss invariance
@pytest.mark.parametrize("base", ["dance_grpo", "flow_grpo"])
def test_logged_loss_of_jagg_groups_equals_the_exact_per_step_loss(backbone, base):
    method = jagg(backbone, f"method.base={base}", "method.jagg_frac=1")
    rollout = rollout_of(method, seed=2)
    rollout.advantages = torch.tensor([1.0, 0.5, -0.25])  # not summing to 0, so the loss does not cancel
    samples = torch.arange(M_ROWS)
    jagg_grad, ours = grads_after(method, lambda: method.backward(rollout, samples, M_ROWS))
    exact_grad, exact = grads_after(method, lambda: super(JAGG, method).backward(rollout, samples, M_ROWS))
    assert ours.keys() == exact.keys() and "loss" in ours
    for k in ours:
        assert float(ours[k]) == pytest.approx(float(exact[k]), rel=1e-5, abs=1e-9), k
    flat = lambda g: torch.cat([g[k].flatten() for k in sorted(g)])  # noqa: E731
    a, b = flat(jagg_grad), flat(exact_grad)
    assert not torch.allclose(a, b) and float(a @ b / (a.norm() * b.norm())) > 0  # only the gradient differs


# ------------------------------------------------------------------------------------------ diagnostic mode
def test_diagnostics_report_per_group_cosines_and_leave_the_training_gradient_alone(backbone):
    method = jagg(backbone, "method.diagnose_every=2")
    rollout = rollout_of(method, seed=3)  # rollout 0: a diagnostic step
    samples = torch.arange(M_ROWS)
    diagnosed, stats = grads_after(method, lambda: method.backward(rollout, samples, M_ROWS))
    metrics = method.step_metrics()
    assert sorted(metrics) == sorted(f"jagg/{k}_group_{g}" for k in ("cos", "rel_err") for g in range(2))
    assert all(-1 <= metrics[f"jagg/cos_group_{g}"] <= 1 + 1e-9 for g in range(2))
    assert all(metrics[f"jagg/rel_err_group_{g}"] > 0 for g in range(2))
    plain, plain_stats = grads_after(method, lambda: method.backward(rollout, samples, M_ROWS))
    assert method.step_metrics() == {}  # only the first backward of a diagnostic step
    for k in plain:
        torch.testing.assert_close(diagnosed[k], plain[k], rtol=1e-5, atol=1e-8)
    assert float(stats["loss"]) == pytest.approx(float(plain_stats["loss"]), rel=1e-6)
    rollout_of(method, seed=4)  # rollout 1: not a diagnostic step
    method.backward(rollout, samples, M_ROWS)
    assert method.step_metrics() == {}


def test_diagnostics_find_window_two_exact(backbone):
    method = jagg(backbone, "method.window=2", "method.jagg_frac=1", "method.diagnose_every=1", steps=5)
    rollout = rollout_of(method, seed=5)
    method.backward(rollout, torch.arange(M_ROWS), M_ROWS)
    metrics = method.step_metrics()
    assert metrics and all(metrics[k] > 1 - 1e-6 for k in metrics if "cos" in k)
    assert all(metrics[k] < 1e-3 for k in metrics if "rel_err" in k)


# ------------------------------------------------------------------------------------------- configuration
def test_stock_values_follow_the_chosen_baseline():
    """method.base=<b> takes <b>'s sampler, advantage and step-rule values (conf/method/<b>.yaml), except the keys
    JAGG deliberately adapts (marked `JAGG:` in conf/method/jagg.yaml)."""
    adapted = {"dance_grpo": {"sampling_steps", "timestep_fraction"}, "flow_grpo_fast": {"window_size"}}
    for base in ("dance_grpo", "flow_grpo", "flow_grpo_fast"):
        ours = OmegaConf.to_container(compose(["method=jagg", f"method.base={base}"]).method, resolve=True)
        theirs = OmegaConf.to_container(compose([f"method={base}"]).method, resolve=True)
        shared = set(theirs) - {"_target_", "name"} - adapted.get(base, set())
        assert {k: ours[k] for k in shared} == {k: theirs[k] for k in shared}, base
    fast = compose(["method=jagg", "method.base=flow_grpo_fast"]).method
    assert (fast.window_size, fast.jagg_frac) == (4, 1.0)
    assert compose(["method=jagg", "method.base=flow_grpo", "method.eta=0.5"]).method.eta == 0.5


BAD = [
    (["method.window=1"], "method.window", "two endpoints"),
    (["method.jagg_frac=1.5"], "method.jagg_frac", "[0, 1]"),
    (["method.jagg_frac=-0.1"], "method.jagg_frac", "[0, 1]"),
    (["method.remainder=error"], "method.window", "method.sampling_steps=9 (8 steps) or method.sampling_steps=13"),
    (["method.sampling_steps=4"], "method.window", "fewer than one group"),
    (["method.base=flow_grpo_fast", "method.window_size=2"], "method.window", "method.window_size=4"),
    (["method.group_fraction=0"], "method.group_fraction", "(0, 1]"),
]


@pytest.mark.parametrize("overrides,key,hint", BAD, ids=[",".join(o) for o, _, _ in BAD])
def test_bad_jagg_configs_fail_before_any_model_is_built(overrides, key, hint, no_model_building, tmp_path):
    cfg = compose(["method=jagg", *overrides])  # CPU-demo scale: sampling_steps=10 -> 9 trained steps
    with pytest.raises(ConfigError) as err:
        Trainer(cfg, RunInfo(run_dir=tmp_path))
    assert key in str(err.value) and hint in str(err.value), str(err.value)


# ------------------------------------------------------------------------------------- end to end, each base
@pytest.mark.slow
@pytest.mark.parametrize(
    "base,fwd,bwd",
    [
        ("dance_grpo", 4 * 9 + 4 * 8, 4 * (2 + 4)),  # 8 trained steps: group 0 JAGG, group 1 exact
        ("flow_grpo", 4 * 9 + 2 * 4 * 8, 4 * (2 + 4)),  # the same, plus a reference forward per step (KL)
        ("flow_grpo_fast", 4 * 9 + 4 * 4, 4 * 2),  # the SDE window of 4 steps is one JAGG group
    ],
)
def test_trainer_runs_jagg_over_each_base_with_the_expected_pass_counts(base, fwd, bwd, tmp_path):
    import json

    cfg = compose(
        [
            "experiment=smoke",
            "logger=none",
            "method=jagg",
            f"method.base={base}",
            "method.sampling_steps=9",
            "method.diagnose_every=2",
            "trainer.threads=1",
        ]
    )  # smoke: 2 prompts x 2 samples
    Trainer(cfg, RunInfo(run_dir=tmp_path)).fit()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert (rows[1]["count/transformer_fwd"], rows[1]["count/transformer_bwd"]) == (fwd, bwd)
    assert "jagg/cos_group_0" in rows[0] and "jagg/cos_group_0" in rows[2] and "jagg/cos_group_0" not in rows[1]
    assert all(r["health/skipped_updates"] == 0 and r["loss"] == r["loss"] for r in rows)
