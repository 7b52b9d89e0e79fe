"""Writes tests/reference/awm_values.json: AWM's trained times, noised latents, log-likelihood surrogate, advantage
scaling, ratio, KL terms, loss and its gradient, computed by the authors' code on fixed float64 inputs. The authors'
code is read from a local clone at the pinned commit and run as it is (nothing of it is copied here):

    repository  scxue/advantage_weighted_matching (Apache-2.0)
    commit      be5137232e33a21b449ed65a533211d0deb97ed8
    file        advantage_weighted_matching/scripts/train_sd3_awm.py:
                compute_log_prob_awm (lines 210-252), and the bodies of main()'s two loops over the training
                batches, run for one batch: the time sampling, noise and old log-likelihoods (lines 1118-1240) and the
                update (lines 1242-1390), with the transformer replaced by a stand-in that returns fixed velocities
                per adapter ("default": v, "ema": v_ema, adapters disabled: v_ref)

Usage: python tests/reference/make_awm_values.py /path/to/advantage_weighted_matching/.git
"""

from __future__ import annotations

import ast
import contextlib
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from diffusers import FlowMatchEulerDiscreteScheduler
from diffusers.utils.torch_utils import randn_tensor

REPO = "scxue/advantage_weighted_matching"
COMMIT = "be5137232e33a21b449ed65a533211d0deb97ed8"
FILE = "advantage_weighted_matching/scripts/train_sd3_awm.py"
OUT = Path(__file__).with_name("awm_values.json")
LATENT = (2, 2, 3)  # (C, H, W) of one latent
N_STEPS = 14  # their sample.num_steps (dgx_awm.py:315)

#: the cases: the authors' PickScore recipe, then every weighting, time sampling, KL weighting and the off-policy
#: path (their update reads the reference's and the EMA adapter's outputs unconditionally, lines 1286-1289: it runs
#: only with train.beta > 0 and train.ema_beta > 0)
CASES: list[dict[str, Any]] = [
    dict(
        name="pickscore_recipe",
        T=6,
        B=2,
        time_type="discrete",
        weighting="ghuber",
        ghuber_power=0.25,
        beta=1e-4,
        ema_beta=1.0,
        kl_weight="Uniform",
        kl_ema_weight="Uniform",
        off_policy=False,
        clip_range=1.0,
    ),
    dict(
        name="geneval_times_elbo",
        T=6,
        B=3,
        time_type="discrete_wo_init",
        weighting="Uniform",
        ghuber_power=0.25,
        beta=3e-3,
        ema_beta=0.5,
        kl_weight="ELBO",
        kl_ema_weight="ELBO",
        off_policy=False,
        clip_range=1.0,
    ),
    dict(
        name="with_init_t",
        T=4,
        B=3,
        time_type="discrete_with_init",
        weighting="t",
        ghuber_power=0.25,
        beta=1e-2,
        ema_beta=0.2,
        kl_weight="Uniform",
        kl_ema_weight="Uniform",
        off_policy=False,
        clip_range=1.0,
    ),
    dict(
        name="huber",
        T=4,
        B=2,
        time_type="discrete",
        weighting="huber",
        ghuber_power=0.25,
        beta=1e-3,
        ema_beta=1.0,
        kl_weight="ELBO",
        kl_ema_weight="Uniform",
        off_policy=False,
        clip_range=1.0,
    ),
    dict(
        name="t2",
        T=5,
        B=2,
        time_type="discrete_wo_init",
        weighting="t**2",
        ghuber_power=0.25,
        beta=1e-3,
        ema_beta=1.0,
        kl_weight="Uniform",
        kl_ema_weight="ELBO",
        off_policy=False,
        clip_range=1.0,
    ),
    dict(
        name="off_policy_clipped",
        T=6,
        B=3,
        time_type="discrete_wo_init",
        weighting="ghuber",
        ghuber_power=0.5,
        beta=1e-3,
        ema_beta=1.0,
        kl_weight="Uniform",
        kl_ema_weight="Uniform",
        off_policy=True,
        clip_range=0.01,
    ),
]


def source(git_dir: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", git_dir, "show", f"{COMMIT}:{FILE}"], check=True, capture_output=True, text=True
    ).stdout


def reference_pieces(text: str) -> tuple[Any, Any, Any]:
    """``compute_log_prob_awm`` as a function, and main()'s two loop bodies over ``samples_batched`` (the old
    log-likelihoods' pass, then the update) as code objects, each wrapped in a one-pass loop for its ``continue``."""
    tree = ast.parse(text)
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "compute_log_prob_awm")
    scope: dict[str, Any] = {"torch": torch}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), FILE, "exec"), scope)
    main = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main")
    loops = [
        n
        for n in ast.walk(main)
        if isinstance(n, ast.For) and "samples_batched" in ast.unparse(n.iter) and "enumerate" in ast.unparse(n.iter)
    ]
    assert len(loops) == 2, len(loops)
    bodies = []
    for loop in sorted(loops, key=lambda n: n.lineno):
        once = ast.For(
            target=ast.Name("_once", ast.Store()),
            iter=ast.List([ast.Constant(0)], ast.Load()),
            body=loop.body,
            orelse=[],
        )
        module = ast.fix_missing_locations(ast.Module(body=[once], type_ignores=[]))
        bodies.append(compile(module, FILE, "exec"))
    return scope["compute_log_prob_awm"], bodies[0], bodies[1]


class StandIn:
    """The transformer: fixed velocities per adapter (``module`` is itself, as their DDP wrapper's)."""

    def __init__(self, outputs: dict[str, torch.Tensor]):
        self.outputs, self.adapter, self.disabled, self.calls = outputs, "default", False, []
        self.module = self

    def set_adapter(self, name: str) -> None:
        self.adapter = name

    @contextlib.contextmanager
    def disable_adapter(self):
        self.disabled = True
        try:
            yield
        finally:
            self.disabled = False

    def __call__(self, hidden_states, timestep, encoder_hidden_states, pooled_projections, return_dict):
        key = "ref" if self.disabled else self.adapter
        self.calls.append({"adapter": key, "hidden_states": hidden_states.detach().clone(), "timestep": timestep})
        return (self.outputs[key],)


def inputs(case: dict[str, Any], k: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(300 + k)
    b, r = case["B"], case["T"] * case["B"]
    x0 = torch.randn(b, *LATENT, generator=g, dtype=torch.float64)
    v = torch.randn(r, *LATENT, generator=g, dtype=torch.float64)
    v_ref = v + 0.3 * torch.randn(r, *LATENT, generator=g, dtype=torch.float64)
    v_ema = v + (0.02 if case["off_policy"] else 0.1) * torch.randn(r, *LATENT, generator=g, dtype=torch.float64)
    adv = torch.tensor([2.0, -1.5, 7.0][:b], dtype=torch.float64)  # the last one is clamped at 5
    return {"x0": x0, "v": v, "v_ref": v_ref, "v_ema": v_ema, "advantages": adv}


def run(pieces, case: dict[str, Any], k: int) -> dict[str, Any]:
    compute_log_prob_awm, old_pass, update = pieces
    x = inputs(case, k)
    b, t = case["B"], case["T"]
    scheduler = FlowMatchEulerDiscreteScheduler(shift=3.0)  # SD3.5-M's (their pipeline.scheduler)
    scheduler.set_timesteps(N_STEPS)
    v = x["v"].clone().requires_grad_(True)
    net = StandIn({"default": v, "ref": x["v_ref"], "ema": x["v_ema"]})
    config = SimpleNamespace(
        time_type=case["time_type"],
        time_shift=3.0,
        sample=SimpleNamespace(num_steps=N_STEPS, guidance_scale=1.0),
        train=SimpleNamespace(
            cfg=False,
            off_policy=case["off_policy"],
            gradient_accumulation_steps=1,
            train_timesteps=t,
            batch_size=b,
            timestep_fraction=0.9,
            weighting=case["weighting"],
            ghuber_power=case["ghuber_power"],
            beta=case["beta"],
            ema_beta=case["ema_beta"],
            adv_clip_max=5,
            advantage_max=1,
            loss_type="exp_first",
            clip_range=case["clip_range"],
            kl_weight=case["kl_weight"],
            kl_ema_weight=case["kl_ema_weight"],
            max_grad_norm=1.0,
        ),
    )
    sample = {
        "prompt_embeds": torch.zeros(b, 2, 3, dtype=torch.float64),
        "pooled_prompt_embeds": torch.zeros(b, 3, dtype=torch.float64),
        "timesteps": scheduler.timesteps.repeat(b, 1),
        "latents": torch.zeros(b, N_STEPS, *LATENT, dtype=torch.float64),
        "next_latents": x["x0"][:, None].expand(b, N_STEPS, *LATENT),
        "advantages": x["advantages"][:, None],
    }
    accelerator = SimpleNamespace(
        device=torch.device("cpu"),
        is_main_process=False,
        sync_gradients=False,
        accumulate=lambda model: contextlib.nullcontext(),
        backward=lambda loss: loss.backward(),
    )
    optimizer = SimpleNamespace(step=lambda: None, zero_grad=lambda: None)
    ns: dict[str, Any] = dict(
        torch=torch,
        randn_tensor=randn_tensor,
        compute_log_prob_awm=compute_log_prob_awm,
        config=config,
        accelerator=accelerator,
        transformer=net,
        pipeline=None,
        autocast=contextlib.nullcontext,
        sample=sample,
        i=0,
        info=defaultdict(list),
        optimizer=optimizer,
        log_metrics=lambda *a, **kw: None,
        global_step=0,
        transformer_trainable_parameters=[v],
    )
    seed = 1000 + k
    torch.manual_seed(seed)
    exec(old_pass, ns)
    torch.manual_seed(seed)  # the same draws again: the uniforms the time sampling read first
    u = torch.rand(t - 1 if case["time_type"] == "discrete_with_init" else t)
    exec(update, ns)
    info = ns["info"]
    trained = [c for c in net.calls if c["adapter"] == "default"][-1]
    return {
        "name": case["name"],
        "config": {key: value for key, value in case.items() if key != "name"},
        "inputs": {key: value.tolist() for key, value in x.items()},
        "times": {
            "u": u.tolist(),
            "grid_timesteps": scheduler.timesteps.tolist(),
            "t_indices": ns["t_indices"].tolist(),
            "sigma": sample["timesteps"].reshape(-1).double().tolist(),
        },
        "noise": sample["train_random_noise"].tolist(),
        "expected": {
            "noised_latents": trained["hidden_states"].tolist(),
            "model_timestep": trained["timestep"].double().tolist(),
            "log_prob": sample["log_probs"].reshape(-1).tolist(),
            "old_log_prob": sample["old_log_probs"].reshape(-1).tolist(),
            "loss": info["loss"][0].item(),
            "policy_loss": info["policy_loss"][0].item(),
            "kl_loss": info["kl_loss"][0].item() if info.get("kl_loss") else None,
            "ema_kl_loss": info["ema_kl_loss"][0].item() if info.get("ema_kl_loss") else None,
            "clipfrac": info["clipfrac"][0].item(),
            "grad_v": v.grad.tolist(),
        },
    }


def main() -> None:
    pieces = reference_pieces(source(sys.argv[1]))
    cases = [run(pieces, case, k) for k, case in enumerate(CASES)]
    meta = {
        "repository": REPO,
        "commit": COMMIT,
        "file": FILE,
        "functions": "compute_log_prob_awm; main(): the two loops over samples_batched, one batch",
    }
    OUT.write_text(json.dumps({"reference": meta, "cases": cases}) + "\n")
    print(f"wrote {OUT}")
    for c in cases:
        print(c["name"], "indices", c["times"]["t_indices"], "clipfrac", c["expected"]["clipfrac"])


if __name__ == "__main__":
    main()
