"""EAM's claim against Adjoint Matching (arXiv:2605.11480, abstract): it converges up to 4x faster and matches or
surpasses AM's quality.

Testbed: the Gaussian SOC toy (``experiment=toy_eam`` / ``toy_am``; docs/methods/eam.md#the-gaussian-toy): a 3-D
pretrained law with an analytic velocity, a fine-tuned residual MLP, reward ``-||x - y||^2 / 2``, so the target
``p_pre exp(lambda r)`` is a known Gaussian at every lambda. Both methods are scored with one ruler: 50-step Heun ODE
samples of the trained model against the same ODE of the analytic target from the same initial noise (common random
numbers, as tests/test_soc_toy.py does), and the *error* is the largest difference of a per-coordinate mean or
variance. Convergence is the CPU time (and the transformer passes) of training until the error first falls within
a tolerance. Methods (each at its preset's batch and learning rate): ``eam`` (the toy preset: a 20-step endpoint,
K_t = 4 loss times), ``eam_parity`` (K_t = 20 on AM's 40-step grid), ``am`` (K = 40, the sigma offset
h = 1/40 of AM's appendix) and ``am_small_h`` (h = 1e-3: the offset's bias on the terminal law vanishes); a lambda
sweep. The per-iteration speed in AM-parity mode, on one batch side by side, is the like-for-like cost figure: on the
toy here and on the tiny FLUX twin through ``scripts/bench_eam.py``'s cost part.
"""

from __future__ import annotations

import statistics

import torch

from claim_studies.common import Context, compute_units, make_trainer, saved, timed_step
from methods.memoryless import MemorylessSchedule
from models.toy_gaussian import gaussian_velocity_am

METHODS = {
    "eam": ["experiment=toy_eam"],
    "eam_parity": [
        "experiment=toy_eam",
        "method.loss_timesteps=20",
        "method.time_sampling=am_grid",
        "method.sampling_steps=40",
    ],
    "am": ["experiment=toy_am"],
    "am_small_h": ["experiment=toy_am", "method.sigma_offset=0.001"],
}
LAMBDAS = (0.4, 0.8, 3.2)  # the reward scales of the full study
TOLERANCES = (0.1, 0.05)  # error within which the target counts as reached (the second is the headline)
RULER_SAMPLES, RULER_STEPS = 4000, 50


class Ruler:
    """Largest per-coordinate |mean| / |variance| error of the model's ODE samples against the target's, on common
    random numbers (the same initial noise for the model and the analytic target, and for every method)."""

    def __init__(self, trainer, lam: float, samples: int = RULER_SAMPLES, seed: int = 4321):
        bb = trainer.backbone
        mu0, var0 = bb.pretrained_law()
        self.target = trainer.reward.tilted_gaussian(mu0, var0, lam)
        self.untilted = (mu0, var0)
        self.samples, self.seed = samples, seed
        self.reference = bb.ode_samples(samples, RULER_STEPS, torch.Generator().manual_seed(seed), law=self.target)

    def errors(self, trainer, law=None) -> tuple[float, float]:
        x = trainer.backbone.ode_samples(self.samples, RULER_STEPS, torch.Generator().manual_seed(self.seed), law=law)
        dmean, dvar = (x - self.reference).mean(0), x.var(0) - self.reference.var(0)
        return float(dmean.abs().max()), float(dvar.abs().max())

    def __call__(self, trainer) -> float:
        return max(self.errors(trainer))


def terminal_bias(
    offset: float, mu0: torch.Tensor, var0: torch.Tensor, steps: int = 40, samples: int = 100_000, seed: int = 0
) -> tuple[float, float]:
    """Mean and variance error (largest over coordinates) of AM's K-step Euler–Maruyama memoryless rollout of the
    *pretrained* model with zero control: what AM's sampler targets with no fine-tuning at all, for offset h."""
    sched = MemorylessSchedule(offset)
    ts = sched.grid(steps)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, mu0.numel(), generator=g, dtype=torch.float64)
    for i in range(steps):
        t = ts[i].expand(samples)
        v = gaussian_velocity_am(x, t, mu0, var0)
        x = sched.em_step(x, v, t, ts[i + 1] - ts[i], torch.randn(x.shape, generator=g, dtype=torch.float64))
    return float((x.mean(0) - mu0).abs().max()), float((x.var(0) - var0).abs().max())


def train_to_target(trainer, ruler: Ruler, iterations: int, eval_every: int) -> dict:
    """Train ``iterations`` steps, scoring every ``eval_every``; the curve is (iteration, CPU s, units, error)."""
    curve = [(0, 0.0, 0.0, ruler(trainer))]
    cpu = units = 0.0
    for step in range(iterations):
        metrics, seconds = timed_step(trainer, step)
        cpu, units = cpu + seconds, units + compute_units(metrics)
        if (step + 1) % eval_every == 0 or step == iterations - 1:
            curve.append((step + 1, cpu, units, ruler(trainer)))
    hits = {}
    for tol in TOLERANCES:
        hit = next((c for c in curve if c[3] <= tol), None)
        hits[f"{tol:g}"] = None if hit is None else {"iteration": hit[0], "cpu_s": hit[1], "units": hit[2]}
    return {
        "curve": curve,
        "time_to": hits,
        "final_error": curve[-1][3],
        "cpu_s_per_iteration": cpu / iterations,
        "units_per_iteration": units / iterations,
    }


def side_by_side_cost(ctx: Context, lam: float, batch: int, rounds: int) -> dict:
    """CPU seconds per iteration of AM and EAM (both modes) on the same batch (a multiple of the toy presets' 64
    samples per prompt), the methods alternating, after a warm-up round."""
    trainers = {}
    for name in ("am", "eam_parity", "eam"):
        trainers[name] = make_trainer(
            [
                *METHODS[name],
                f"method.reward_scale={lam}",
                "method.group_size=64",
                f"method.prompts_per_step={batch // 64}",
                f"method.update_batch={batch * 64}",
                f"trainer.threads={ctx.threads}",
            ],
            ctx.work / "eam" / "cost" / name,
        )
    times: dict[str, list[float]] = {n: [] for n in trainers}
    units = {}
    for r in range(rounds + 1):
        for name in list(trainers) if r % 2 == 0 else list(trainers)[::-1]:
            metrics, seconds = timed_step(trainers[name], r)
            if r:
                times[name].append(seconds)
            units[name] = compute_units(metrics) / batch
    med = {n: statistics.median(v) for n, v in times.items()}
    return {
        "batch": batch,
        "rounds": rounds,
        "cpu_s_per_iteration": med,
        "units_per_sample": units,
        "am_over_eam_parity": med["am"] / med["eam_parity"],
        "am_over_eam": med["am"] / med["eam"],
    }


def twin_cost(ctx: Context) -> dict:
    """scripts/bench_eam.py's cost part on the tiny FLUX twin (LoRA): AM, EAM and EAM in AM-parity mode."""
    import bench_eam

    argv = [
        "--parts",
        "cost",
        "--rounds",
        "1" if ctx.quick else "5",
        "--warmup",
        "0" if ctx.quick else "1",
        "--threads",
        str(ctx.threads),
    ]
    return bench_eam.main(argv)


def run(ctx: Context) -> dict:
    say = ctx.say
    lams = [0.8] if ctx.quick else [float(x) for x in ctx.parts] if ctx.parts else list(LAMBDAS)
    iterations = (
        {"eam": 4, "eam_parity": 2, "am": 2, "am_small_h": 2}
        if ctx.quick
        else {"eam": 300, "eam_parity": 150, "am": 200, "am_small_h": 200}
    )
    every = (
        {"eam": 2, "eam_parity": 1, "am": 1, "am_small_h": 1}
        if ctx.quick
        else {"eam": 10, "eam_parity": 5, "am": 5, "am_small_h": 5}
    )
    samples = 500 if ctx.quick else RULER_SAMPLES
    out = {
        "lambdas": lams,
        "iterations": iterations,
        "tolerances": list(TOLERANCES),
        "seeds": ctx.seeds,
        "ruler": {"samples": samples, "steps": RULER_STEPS},
        "by_lambda": {},
    }
    for lam in lams:
        res = {"precondition": None, "runs": {}}
        for name in METHODS:
            runs = []
            for seed in ctx.seeds:
                overrides = [
                    *METHODS[name],
                    f"method.reward_scale={lam}",
                    f"trainer.seed={seed}",
                    f"model.seed={seed}",
                    f"trainer.threads={ctx.threads}",
                ]
                run_dir = ctx.work / "eam" / f"lam{lam:g}" / f"{name}_seed{seed}"
                key = {
                    "overrides": overrides[:-1],
                    "samples": samples,
                    "iterations": iterations[name],
                    "every": every[name],
                }
                built: dict = {}

                def trainer_and_ruler():  # built only when a run (or the precondition) is not saved yet
                    if not built:
                        built["trainer"] = make_trainer(overrides, run_dir)
                        built["ruler"] = Ruler(built["trainer"], lam, samples)
                    return built["trainer"], built["ruler"]

                if res["precondition"] is None:
                    res["precondition"] = saved(
                        ctx.work / "eam" / f"lam{lam:g}" / "precondition.json",
                        key,
                        lambda: precondition(*trainer_and_ruler(), lam),
                    )
                    p = res["precondition"]
                    say(
                        f"[eam] lambda {lam:g}: the base model is {p['base_error']:.3f} from the target (against its "
                        f"own law {p['self_error']:.4f}; the reference samples' own error {p['reference_error']:.4f}); "
                        f"AM's zero-control terminal error h=1/40: {p['am_bias']['0.025']}, "
                        f"h=1e-3: {p['am_bias']['0.001']}: {'PASSED' if p['passed'] else 'FAILED'}"
                    )
                run_ = saved(
                    run_dir / "record.json",
                    key,
                    lambda: train_to_target(*trainer_and_ruler(), iterations[name], every[name]),
                )
                runs.append(run_)
                say(
                    f"[eam] lambda {lam:g} {name:10s} seed {seed}: error {run_['curve'][0][3]:.3f} -> "
                    f"{run_['final_error']:.4f}, time to {TOLERANCES[-1]:g}: "
                    f"{(run_['time_to'][f'{TOLERANCES[-1]:g}'] or {}).get('cpu_s', 'never')}, "
                    f"{run_['cpu_s_per_iteration']:.3f} CPU s/iteration"
                )
            res["runs"][name] = runs
        out["by_lambda"][f"{lam:g}"] = res
    out["cost_toy"] = side_by_side_cost(ctx, 0.8, 256, 2 if ctx.quick else 10)
    say(
        f"[eam] toy, one batch of 256, side by side: AM / EAM-parity {out['cost_toy']['am_over_eam_parity']:.2f}x, "
        f"AM / EAM {out['cost_toy']['am_over_eam']:.2f}x CPU time per iteration"
    )
    out["cost_twin"] = twin_cost(ctx)
    return out


def precondition(trainer, ruler: Ruler, lam: float) -> dict:
    """The ruler resolves the claim: the base model is far from the target (at least 4x the headline tolerance); the
    untrained model scored against its own analytic law is 0 (the common random numbers cancel the solver's and the
    Monte-Carlo error), and the reference samples' own error against the exact target shows what they cancel. The
    bias of AM's sampler with no fine-tuning, which its offset h causes, is reported for both offsets."""
    mu0, var0 = ruler.untilted
    base = ruler(trainer)
    own = trainer.backbone.ode_samples(ruler.samples, RULER_STEPS, torch.Generator().manual_seed(ruler.seed))
    law = trainer.backbone.ode_samples(
        ruler.samples, RULER_STEPS, torch.Generator().manual_seed(ruler.seed), law=(mu0, var0)
    )
    self_error = max(float((own - law).mean(0).abs().max()), float((own.var(0) - law.var(0)).abs().max()))
    mu_t, var_t = ruler.target
    reference_error = max(
        float((ruler.reference.mean(0) - mu_t).abs().max()), float((ruler.reference.var(0) - var_t).abs().max())
    )
    bias = {f"{h:g}": [round(v, 4) for v in terminal_bias(h, mu0, var0)] for h in (0.025, 0.001)}
    return {
        "base_error": base,
        "self_error": self_error,
        "reference_error": reference_error,
        "am_bias": bias,
        "target_mean": mu_t.tolist(),
        "target_var": var_t.tolist(),
        "passed": base >= 4 * TOLERANCES[-1] and self_error <= TOLERANCES[-1] / 5,
    }
