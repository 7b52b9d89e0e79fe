"""Flash-GRPO's claim (arXiv:2605.15980): one-SDE-step GRPO trains stably and beats both Flow-GRPO-Fast with one SDE
step ("Fast1", which collapses in the paper's Fig. 4) and full-trajectory Flow-GRPO (Fig. 5) at equal compute,
thanks to iso-temporal grouping (one k* per prompt group) and temporal gradient rectification (1/lambda weights).

Two testbeds, each checked first for what the claim needs, that a group's expected reward depends on its SDE step k*
(else grouping has nothing to remove) and that lambda(t_k) spreads widely over the pool (else rectification has
nothing to equalise):

* ``linear``: the 1-D linear-Gaussian problem of :mod:`claim_studies.flash_linear` (closed-form expectations, checked
  against the Monte-Carlo measurement), cheap enough for an lr sweep and two seed sets;
* ``twin``: the tiny FLUX twin with its transformer first pre-trained by flow matching (scripts/bench_eam.py), the
  JPEG-compressibility reward (DDPO's, arXiv:2305.13301), evaluated on held-out prompts. The colour reward fails the
  precondition here (a group's expected reward across k* varies 0.34x its sampling noise at a = 1.5): a mean colour
  averages the SDE step's noise away, while the JPEG size of the twin's flat synthetic images counts the noise the
  step leaves, more of it the earlier the step (measured 9.3x at a = 1.5, 0.6x at a = 1).

Variants, all on the same sampler (10 steps, Flow-GRPO's flow kernel), clip range, advantages and pool of SDE steps
0..8: ``flash`` (the method), ``itg`` (grouping, no rectification), ``rect`` (rectification, one k* per sample),
``mixed`` (neither: the paper's Fast1, whose window is drawn per rank so a group mixes SDE steps), ``fast1``
(``method=flow_grpo_fast window_size=1``: on one process its window is drawn per batch, so every group shares it) and
``flow_grpo`` (SDE at every step, 9 trained steps). Each trains to the same compute (forwards + 2 x backwards counted
on the model), at its own best learning rate of a sweep; the verdict compares final evaluation rewards per seed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from claim_studies import flash_linear
from claim_studies.common import Context, make_trainer, saved
from claim_studies.evaluation import FixedNoiseEval
from claim_studies.flash_probes import kstar_effect, method_settings, per_kstar_gradient_norms
from claim_studies.training import RunRecord, train
from methods.rectification import rectification_factor

STEPS = 10  # sampling steps of every variant
POOL = list(range(STEPS - 1))  # k* in 0..8: the whole trajectory but the last step (never an SDE step)
BETWEEN_OVER_NOISE_MIN = 4.0  # precondition: a group's expected reward varies with k* 4x its sampling noise
LAMBDA_SPREAD_MIN = 4.0  # ... and lambda spreads at least 4x over the pool
FLASH_FAMILY = ("flash", "itg", "rect", "mixed")
VARIANTS = {
    "flash": ["method=flash_grpo"],
    "itg": ["method=flash_grpo", "method.rectify=false"],
    "rect": ["method=flash_grpo", "method.iso_temporal=false"],
    "mixed": ["method=flash_grpo", "method.iso_temporal=false", "method.rectify=false"],
    "fast1": ["method=flow_grpo_fast", "method.window_size=1", f"method.window_range=[{POOL[0]},{POOL[-1] + 1}]"],
    "flow_grpo": ["method=flow_grpo", "method.timestep_fraction=0.99"],
}
HELD_OUT = [
    "a red car",
    "a green flower",
    "a blue circle",
    "a yellow square",
    "a cyan tree",
    "a magenta house",
    "a white cat",
    "a black dog",
]


@dataclass
class Testbed:
    """One testbed: its overrides, batch, sweep and budget (in Flash-GRPO steps), and its evaluation."""

    name: str
    title: str
    overrides: list[str]
    etas: list[float]  # the flow kernel's noise level a: the first that meets the precondition
    prompts: int
    group: int
    lrs: list[float]
    steps: int
    sweep_seeds: list[int]
    confirm_seeds: list[int]
    eval_prompts: list[str]
    eval_per_prompt: int
    eval_steps: int
    pretrain_steps: int = 0  # flow-matching pre-training of the twin's transformer (cached)
    groups_per_cell: int = 4  # precondition: groups per (prompt, k*) cell ...
    precondition_prompts: int | None = None  # ... for every prompt of the data, or the first few
    seed_model: bool = False  # model.seed follows the training seed (the toy's MLP init)
    linear: dict = field(default_factory=dict)  # the 1-D problem's parameters (closed form)
    eta: float = 0.0  # set by the precondition

    def __post_init__(self):
        self.eta = self.etas[0]

    @property
    def samples(self) -> int:
        return self.prompts * self.group

    @property
    def budget(self) -> float:
        """Compute of ``steps`` Flash-GRPO steps: per sample N rollout forwards, 1 forward + 1 backward."""
        return float(self.steps * self.samples * (STEPS + 1 + 2))

    def overrides_for(self, variant: str, seed: int, lr: float, threads: int) -> list[str]:
        method = [
            f"method.group_size={self.group}",
            f"method.prompts_per_step={self.prompts}",
            f"method.sampling_steps={STEPS}",
            "method.shift=3.0",
            "method.schedule=scheduler",
            "method.noise_kernel=flow",
            f"method.eta={self.eta}",
            "method.clip_range=1e-3",
            "method.adv_clip_max=5.0",
            "method.advantage=prompt",
            "method.global_std=true",
            "method.updates_per_rollout=2",
            f"method.update_batch={self.samples}",
            "method.shuffle_samples=true",
            "method.init_same_noise=false",
            "method.decode=final",
            "method.quantize_timestep=false",
            "method.kl_beta=0.0",
        ]
        if variant in FLASH_FAMILY:
            method.append(f"method.sde_index_pool=[{','.join(map(str, POOL))}]")
        model_seed = [f"model.seed={seed}"] if self.seed_model else []
        return [
            *VARIANTS[variant],
            *self.overrides,
            *method,
            *model_seed,
            f"optimizer.lr={lr}",
            f"trainer.seed={seed}",
            f"trainer.threads={threads}",
        ]


def linear_testbed(quick: bool, seeds: list[int]) -> Testbed:
    mu0, var0, target = 0.0, 0.05, 0.1
    return Testbed(
        name="linear",
        title="1-D linear-Gaussian problem (closed form)",
        overrides=[
            "model=toy_gaussian",
            "reward=gaussian_tilt",
            f"model.mu0=[{mu0}]",
            f"model.var0=[{var0}]",
            "reward.kind=quadratic",
            "reward.gamma=1.0",
            f"reward.target=[{target}]",
        ],
        # the sweep: 3 seeds of 3 learning rates (1e-2 collapsed Flash-GRPO itself in a pilot, as 3e-3 already does)
        etas=[1.0],
        prompts=4,
        group=8,
        lrs=[1e-3] if quick else [3e-4, 1e-3, 3e-3],
        steps=3 if quick else 300,
        sweep_seeds=[] if quick else list(seeds)[:3],
        confirm_seeds=[s + 100 for s in seeds],
        eval_prompts=["toy"],
        eval_per_prompt=256 if quick else 4096,
        eval_steps=20,
        groups_per_cell=1 if quick else 16,
        seed_model=True,
        linear={"mu0": mu0, "var0": var0, "target": target, "gamma": 1.0, "dims": 3},
    )


def twin_testbed(quick: bool, seeds: list[int]) -> Testbed:
    return Testbed(
        name="twin",
        title="tiny FLUX twin, flow-matching pre-trained, JPEG-compressibility reward",
        overrides=["model=tiny_flux", "reward=jpeg"],
        etas=[1.0] if quick else [1.0, 1.5],
        prompts=2,
        group=8,
        # quick: 3 Flash-GRPO steps, the least budget that holds one Flow-GRPO step (16 x 37 passes)
        lrs=[1e-3] if quick else [3e-4, 1e-3, 3e-3],
        steps=3 if quick else 100,
        sweep_seeds=[] if quick else [1000, 1001],
        confirm_seeds=list(seeds),
        eval_prompts=HELD_OUT,
        eval_per_prompt=1 if quick else 4,
        eval_steps=10,
        pretrain_steps=4 if quick else 600,
        groups_per_cell=1 if quick else 2,
        precondition_prompts=2 if quick else None,
    )


# ------------------------------------------------------------------------------------------------ one testbed
class Runner:
    """Builds the testbed's trainers (with the pre-trained twin loaded) and trains them against one ruler."""

    def __init__(self, tb: Testbed, ctx: Context):
        self.tb, self.ctx, self.ruler, self.state, self.say = tb, ctx, None, None, ctx.say
        if tb.pretrain_steps:
            from bench_eam import pretrained_twin

            self.state = pretrained_twin(tb.pretrain_steps)
        self.count = 0

    def trainer(self, variant: str, seed: int, lr: float, tag: str = ""):
        self.count += 1
        trainer = make_trainer(
            self.tb.overrides_for(variant, seed, lr, self.ctx.threads), self.run_dir(variant, seed, lr, tag)
        )
        if self.state is not None:
            from bench_eam import load_twin

            load_twin(trainer, self.state)
        if self.ruler is None:
            self.ruler = FixedNoiseEval(trainer, self.tb.eval_prompts, self.tb.eval_per_prompt, self.tb.eval_steps)
        return trainer

    def run(self, variant: str, seed: int, lr: float, probe: bool = False) -> RunRecord:
        """One run's record, kept in its run folder (a rerun of the study reuses it)."""

        def compute() -> dict:
            trainer = self.trainer(variant, seed, lr)
            record = train(trainer, self.ruler, budget_units=self.tb.budget)
            if probe:
                record.extras["grad_norms_end"] = per_kstar_gradient_norms(trainer)
            return record.to_json()

        key = {
            "overrides": self.tb.overrides_for(variant, seed, lr, 1),
            "budget": self.tb.budget,
            "probe": probe,
            "eval": [self.tb.eval_prompts, self.tb.eval_per_prompt, self.tb.eval_steps],
        }
        return RunRecord.from_json(saved(self.run_dir(variant, seed, lr) / "record.json", key, compute))

    def run_dir(self, variant: str, seed: int, lr: float, tag: str = "") -> Path:
        return self.ctx.work / "flash" / self.tb.name / f"{tag}{variant}_lr{lr:g}_seed{seed}"


def precondition(runner: Runner) -> dict:
    """The k* effect and the lambda spread on the pre-trained model (and the closed form on the 1-D problem), at the
    first noise level of ``etas`` that meets the check (which the testbed then trains at)."""
    tb, tried = runner.tb, []
    for eta in tb.etas:
        tb.eta = eta
        key = {
            "overrides": tb.overrides_for("flash", 0, tb.lrs[0], 1),
            "groups_per_cell": tb.groups_per_cell,
            "prompts": tb.precondition_prompts,
            "pretrain_steps": tb.pretrain_steps,
            "linear": tb.linear,
        }
        out = saved(
            runner.run_dir("flash", 0, tb.lrs[0], f"precondition_eta{eta:g}_") / "precondition.json",
            key,
            lambda: measure_precondition(runner),
        )
        tried.append({k: out[k] for k in ("eta", "between_over_noise", "lambda_spread", "passed")})
        out["tried"] = tried
        runner.say(
            f"[flash/{tb.name}] precondition at eta {eta:g}: a group's expected reward across k* varies "
            f"{out['between_over_noise']:.2f}x its sampling noise (need >= {BETWEEN_OVER_NOISE_MIN:g}; "
            f"measured {out['measured']['between_over_noise']:.2f} on {out['measured']['samples']} rollouts), "
            f"lambda spread {out['lambda_spread']:.1f}x (need >= {LAMBDA_SPREAD_MIN:g}), SDE-step share of "
            f"the within-group variance {out['measured']['xi_share']:.2f}: "
            f"{'PASSED' if out['passed'] else 'FAILED'}"
        )
        if out["passed"]:
            break
    return out


def measure_precondition(runner: Runner) -> dict:
    tb = runner.tb
    trainer = runner.trainer("flash", 0, tb.lrs[0], tag=f"precondition_eta{tb.eta:g}_")
    method = trainer.method
    lam = rectification_factor(method.sde, torch.tensor(POOL)).tolist()
    out = {
        "eta": tb.eta,
        "pool": POOL,
        "lambda": lam,
        "lambda_spread": max(lam) / min(lam),
        "measured": kstar_effect(trainer, POOL, tb.groups_per_cell, tb.precondition_prompts),
    }
    if tb.linear:
        p = tb.linear
        out["analytic"] = flash_linear.analyse(
            method.sde, POOL, p["mu0"], p["var0"], p["target"], p["gamma"], p["dims"], tb.group
        )
    with method_settings(method, rectify=False):
        unrectified = per_kstar_gradient_norms(trainer)
    out["grad_norms_init"] = {"flash": per_kstar_gradient_norms(trainer), "itg": unrectified}
    ratio = (out["analytic"] if tb.linear else out["measured"])["between_over_noise"]
    out["between_over_noise"] = ratio
    out["passed"] = ratio >= BETWEEN_OVER_NOISE_MIN and out["lambda_spread"] >= LAMBDA_SPREAD_MIN
    return out


def run_testbed(tb: Testbed, ctx: Context) -> dict:
    """The testbed's precondition, lr sweep and confirmation runs, as JSON-ready data."""
    say = ctx.say
    runner = Runner(tb, ctx)
    pre = precondition(runner)
    result = {
        "testbed": tb.name,
        "title": tb.title,
        "precondition": pre,
        "budget_units": tb.budget,
        "budget_flash_steps": tb.steps,
        "samples_per_step": tb.samples,
        "lrs": tb.lrs,
        "eta": tb.eta,
        "overrides": tb.overrides_for("flash", 0, tb.lrs[0], ctx.threads),
        "seeds": ctx.seeds,  # the --seeds the confirmation seeds derive from
        "sweep_seeds": tb.sweep_seeds,
        "sweep": {},
        "runs": {},
    }
    if not pre["passed"] and not ctx.quick:
        return result
    for variant in VARIANTS:  # the lr sweep (each variant at its own best lr)
        finals = {}
        for lr in tb.lrs if tb.sweep_seeds else []:
            finals[f"{lr:g}"] = [runner.run(variant, s, lr).final for s in tb.sweep_seeds]
            say(
                f"[flash/{tb.name}] sweep {variant:9s} lr {lr:g}: final eval "
                f"{sum(finals[f'{lr:g}']) / len(tb.sweep_seeds):.4f} (seeds {tb.sweep_seeds})"
            )
        result["sweep"][variant] = finals
    for variant in VARIANTS:  # fresh seeds at the chosen lr
        finals = result["sweep"][variant]
        lr = float(max(finals, key=lambda k: sum(finals[k]) / len(finals[k]))) if finals else tb.lrs[0]
        records = []
        for i, seed in enumerate(tb.confirm_seeds):
            records.append(runner.run(variant, seed, lr, probe=i == 0 and variant in FLASH_FAMILY))
            say(
                f"[flash/{tb.name}] {variant:9s} lr {lr:g} seed {seed}: eval {records[-1].first:.4f} -> "
                f"{records[-1].final:.4f}"
            )
        result["runs"][variant] = {"lr": lr, "seeds": tb.confirm_seeds, "records": [r.to_json() for r in records]}
    return result


TESTBEDS = {"linear": linear_testbed, "twin": twin_testbed}


def run(ctx: Context) -> dict:
    """The testbeds' data (all, or ``ctx.parts``); :mod:`claim_studies.flash_report` turns it into the write-up."""
    names = ctx.parts or list(TESTBEDS)
    return {name: run_testbed(TESTBEDS[name](ctx.quick, ctx.seeds), ctx) for name in names}
