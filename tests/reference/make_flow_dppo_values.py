"""Writes tests/reference/flow_dppo_values.json: Flow-DPPO's per-step KL, mask, loss and gradients, the std its KL
divides by, and the SDE steps of its recipe's sampler, computed by the authors' code on fixed float64 inputs. The
functions are read from local clones at the pinned commits and run as they are (nothing of them is copied here):

    repository  Tencent-Hunyuan/UniRL (the authors')
    commit      1a7b501e8fe8517b432a130220d2ff462f9b5afa (these files unchanged since the initial release a1f8596)
    files       unirl/algorithms/flowdppo.py: _gaussian_kl_div, _flowdppo_kl_adv_loss, FlowDPPO._compute_sigma_t
                unirl/sde/kernels.py: FlowSDEStrategy.step (the std of the SDE step, std_dev_t sqrt(-dt))
                unirl/utils/scheduler_utils.py: AllSDEScheduler.get_sde_indices

    cross-check verl-project/verl-omni @a1139bafffb5b9711f0a6b6edff8ecaa60bfff30,
                verl_omni/trainer/diffusion/diffusion_algos.py: FlowDPPOLoss.compute_loss

Usage: python tests/reference/make_flow_dppo_values.py /path/to/UniRL/.git /path/to/verl-omni/.git
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
import types
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

import numpy as np
import torch

UNIRL = {"repository": "Tencent-Hunyuan/UniRL", "commit": "1a7b501e8fe8517b432a130220d2ff462f9b5afa"}
LOSS_FILE = "unirl/algorithms/flowdppo.py"
KERNEL_FILE = "unirl/sde/kernels.py"
SCHEDULER_FILE = "unirl/utils/scheduler_utils.py"
VERL_OMNI = {"repository": "verl-project/verl-omni", "commit": "a1139bafffb5b9711f0a6b6edff8ecaa60bfff30"}
VERL_FILE = "verl_omni/trainer/diffusion/diffusion_algos.py"
OUT = Path(__file__).with_name("flow_dppo_values.json")


def show(git_dir: str, commit: str, path: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", git_dir, "show", f"{commit}:{path}"], check=True, capture_output=True, text=True
    ).stdout


def functions(text: str, path: str, names: list[str], cls: str | None = None) -> dict[str, Any]:
    """The named functions of a module (or of one of its classes) as plain functions, decorators dropped."""
    tree = ast.parse(text)
    body = (
        tree.body if cls is None else next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls).body
    )
    scope: dict[str, Any] = {
        "torch": torch,
        "Any": Any,
        "Dict": dict,
        "List": list,
        "Optional": Optional,
        "Tuple": tuple,
        "DiffusionActorConfig": object,
    }
    for fn in body:
        if isinstance(fn, ast.FunctionDef) and fn.name in names:
            source = textwrap.dedent(ast.get_source_segment(text, fn) or "")
            exec(compile(source[source.index("def ") :], path, "exec"), scope)
    return {n: scope[n] for n in names}


def module(text: str, path: str) -> dict[str, Any]:
    """A whole module that imports only the standard library, numpy and torch (its dataclasses need it registered)."""
    mod = types.ModuleType("reference_" + Path(path).stem)
    sys.modules[mod.__name__] = mod
    exec(compile(text, path, "exec"), mod.__dict__)
    return mod.__dict__


def schedule(n: int, shift: float = 3.0) -> torch.Tensor:
    """SD3's shifted grid, sigma_0 = 1, sigma_N = 0 (both implementations take it as given)."""
    t = torch.linspace(1.0, 0.0, n + 1, dtype=torch.float64)
    return shift * t / (1 + (shift - 1) * t)


def loss_cases(unirl: str) -> list[dict[str, Any]]:
    text = show(unirl, UNIRL["commit"], LOSS_FILE)
    f = functions(text, LOSS_FILE, ["_gaussian_kl_div", "_flowdppo_kl_adv_loss"])
    compute_sigma_t = functions(text, LOSS_FILE, ["_compute_sigma_t"], cls="FlowDPPO")["_compute_sigma_t"]
    kernel = module(show(unirl, UNIRL["commit"], KERNEL_FILE), KERNEL_FILE)["FlowSDEStrategy"]()
    gen = torch.Generator().manual_seed(30)
    n, eta, steps, b, shape = 10, 0.7, [0, 2, 4], 4, (2, 3, 3)
    sigmas = schedule(n)
    out = []
    for kind in ("step", "unirl", "none"):
        if kind == "step":  # the SDE step's own std (the SD3 stage passes sigma_max = schedule[1])
            stds = [
                kernel.step(
                    torch.zeros(shape, dtype=torch.float64),
                    torch.zeros(shape, dtype=torch.float64),
                    sigmas[i],
                    sigmas[i + 1],
                    eta=eta,
                    prev_sample=torch.zeros(shape, dtype=torch.float64),
                    sigma_max=sigmas[1],
                )[2]
                for i in steps
            ]
            sigma_t = torch.stack(stds).reshape(1, -1, 1, 1, 1)
        else:
            me = SimpleNamespace(add_kl_coefficient=kind == "unirl", params=SimpleNamespace(eta=eta))
            sigma_t = compute_sigma_t(me, SimpleNamespace(sigmas=sigmas), steps, torch.device("cpu")).double()
        old_means = torch.randn(b, len(steps), *shape, generator=gen, dtype=torch.float64)
        scale = torch.tensor([1e-3, 3e-3, 1e-2, 3e-2], dtype=torch.float64)[torch.randperm(4, generator=gen)]
        drift = scale.repeat(3)[: b * len(steps)].reshape(b, len(steps), 1, 1, 1) * 0.3
        new_means = old_means + drift * torch.randn(old_means.shape, generator=gen, dtype=torch.float64)
        old_logp = 0.3 * torch.randn(b, len(steps), generator=gen, dtype=torch.float64)
        new_logp = old_logp + 0.05 * torch.randn(b, len(steps), generator=gen, dtype=torch.float64)
        advantages = torch.tensor([1.3, -0.7, 6.0, -2.1], dtype=torch.float64)  # 6.0: the loss does not clamp
        kl = f["_gaussian_kl_div"](new_means, old_means, sigma_t)
        kl = kl.mean(dim=tuple(range(2, kl.ndim))).flatten().sort().values  # as _flowdppo_kl_adv_loss reduces
        threshold = float((kl[5] * kl[6]).sqrt())  # half of the rows above (no row near it)
        inputs = {
            "kind": kind,
            "eta": eta,
            "sigmas": sigmas.tolist(),
            "steps": steps,
            "threshold": threshold,
            "old_logp": old_logp.tolist(),
            "new_logp": new_logp.tolist(),
            "old_means": old_means.tolist(),
            "new_means": new_means.tolist(),
            "advantages": advantages.tolist(),
        }
        logp = new_logp.clone().requires_grad_(True)
        means = new_means.clone().requires_grad_(True)
        adv = advantages.reshape(-1, 1).expand_as(logp)  # as compute_loss_and_backward broadcasts them
        per_elem, metrics = f["_flowdppo_kl_adv_loss"](
            new_logp=logp,
            old_logp=old_logp,
            new_means=means,
            old_means=old_means,
            advantages=adv,
            sigma_t=sigma_t,
            kl_mask_threshold=threshold,
        )
        loss = per_elem.mean()
        grad_logp, grad_means = torch.autograd.grad(loss, (logp, means), allow_unused=True)
        kl_rows = f["_gaussian_kl_div"](new_means, old_means, sigma_t)
        expected = {
            "sigma_t": sigma_t.flatten().tolist(),
            "kl": kl_rows.mean(dim=tuple(range(2, kl_rows.ndim))).tolist(),
            "loss_per_elem": per_elem.detach().tolist(),
            "loss": loss.item(),
            "grad_new_logp": grad_logp.tolist(),
            "grad_new_means_is_zero": grad_means is None or bool((grad_means == 0).all()),
            **{k: float(v) for k, v in metrics.items()},
        }
        out.append({"inputs": inputs, "expected": expected})
    return out


def verl_omni_loss(verl: str, case: dict[str, Any]) -> dict[str, Any]:
    """verl-omni's FlowDPPOLoss on the same rows, one call per step (its batches hold one timestep), the steps'
    losses averaged: the mean over every row, as UniRL's."""
    text = show(verl, VERL_OMNI["commit"], VERL_FILE)
    f = functions(text, VERL_FILE, ["_broadcast_sqrt_dt", "compute_loss"], cls="FlowDPPOLoss")
    cls = SimpleNamespace(_broadcast_sqrt_dt=f["_broadcast_sqrt_dt"])
    x = case["inputs"]
    cfg = SimpleNamespace(diffusion_loss=SimpleNamespace(kl_mask_threshold=x["threshold"], add_kl_coefficient=True))
    sigmas, eta = torch.tensor(x["sigmas"]), x["eta"]
    logp = torch.tensor(x["new_logp"], requires_grad=True)
    total = torch.zeros((), dtype=torch.float64)
    for j, i in enumerate(x["steps"]):
        sigma = sigmas[i]
        g = eta * torch.sqrt(sigma / (1 - torch.where(sigma == 1, sigmas[1], sigma)))  # the std_dev_t its SDE outputs
        m = logp.shape[0]
        loss, _ = f["compute_loss"](
            cls,
            old_log_prob=torch.tensor(x["old_logp"])[:, j],
            log_prob=logp[:, j],
            advantages=torch.tensor(x["advantages"]),
            config=cfg,
            old_prev_sample_mean=torch.tensor(x["old_means"])[:, j],
            prev_sample_mean=torch.tensor(x["new_means"])[:, j],
            std_dev_t=g.expand(m).reshape(m, 1, 1, 1),
            sqrt_dt=torch.sqrt(sigma - sigmas[i + 1]).expand(m),
        )
        total = total + loss / len(x["steps"])
    (grad,) = torch.autograd.grad(total, (logp,))
    return {"loss": total.item(), "grad_new_logp": grad.tolist()}


def sde_step_cases(unirl: str) -> list[dict[str, Any]]:
    scheduler = module(show(unirl, UNIRL["commit"], SCHEDULER_FILE), SCHEDULER_FILE)["AllSDEScheduler"]
    out = []
    for n, fraction, count in ((10, [0.0, 0.5], 3), (16, [0.25, 0.75], 4), (10, [0.0, 0.3], 3), (20, [0.1, 0.9], 1)):
        s = scheduler(num_timesteps=n, timestep_fraction=fraction, num_sde_steps=count)
        draws = [sorted(int(i) for i in s.get_sde_indices(it)) for it in range(20)]
        out.append({"sampling_steps": n, "sde_range": fraction, "sde_steps": count, "draws": draws})
    return out


def main() -> None:
    unirl, verl = sys.argv[1], sys.argv[2]
    torch.set_default_dtype(torch.float64)
    cases = loss_cases(unirl)
    step_case = next(c for c in cases if c["inputs"]["kind"] == "step")
    step_case["expected"]["verl_omni"] = verl_omni_loss(verl, step_case)
    meta = {
        **UNIRL,
        "files": {
            LOSS_FILE: "_gaussian_kl_div, _flowdppo_kl_adv_loss, FlowDPPO._compute_sigma_t",
            KERNEL_FILE: "FlowSDEStrategy.step",
            SCHEDULER_FILE: "AllSDEScheduler.get_sde_indices",
        },
        "cross_check": {**VERL_OMNI, "file": VERL_FILE, "function": "FlowDPPOLoss.compute_loss"},
        "numpy": np.__version__,
    }
    OUT.write_text(
        json.dumps({"reference": meta, "loss_cases": cases, "sde_step_cases": sde_step_cases(unirl)}, indent=1) + "\n"
    )
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
