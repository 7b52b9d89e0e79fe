"""Writes tests/reference/grpo_guard_values.json: GRPO-Guard's loss, ratio and gradients computed by the reference
code on fixed float64 inputs. The reference function is read from a local clone at the pinned commit and run as it is
(nothing of it is copied here):

    repository  verl-project/verl-omni (Apache-2.0)
    commit      a1139bafffb5b9711f0a6b6edff8ecaa60bfff30
    file        verl_omni/trainer/diffusion/diffusion_algos.py, GRPOGuardLoss.compute_loss

Usage: python tests/reference/make_grpo_guard_values.py /path/to/verl-omni/.git
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

import torch

REPO = "verl-project/verl-omni"
COMMIT = "a1139bafffb5b9711f0a6b6edff8ecaa60bfff30"
FILE = "verl_omni/trainer/diffusion/diffusion_algos.py"
OUT = Path(__file__).with_name("grpo_guard_values.json")


def reference_compute_loss(git_dir: str):
    """``GRPOGuardLoss.compute_loss`` from the pinned file, as a plain function."""
    text = subprocess.run(
        ["git", "--git-dir", git_dir, "show", f"{COMMIT}:{FILE}"], check=True, capture_output=True, text=True
    ).stdout
    tree = ast.parse(text)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "GRPOGuardLoss")
    fn = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "compute_loss")
    fn.decorator_list = []
    source = textwrap.dedent(ast.get_source_segment(text, fn) or "")
    source = source[source.index("def ") :]  # without the @classmethod line
    scope: dict[str, Any] = {"torch": torch, "Optional": Optional, "Any": Any, "DiffusionActorConfig": object}
    exec(compile(source, FILE, "exec"), scope)
    return partial(scope["compute_loss"], None)  # cls: unused by the body


def cases() -> list[dict[str, Any]]:
    """Rows of one step each call (the reference collapses the step's scale to one scalar), several steps."""
    gen = torch.Generator().manual_seed(30)
    out = []
    sigmas = [(1.0, 0.9, 0.7), (0.6, 0.5, 1.2), (0.2, 0.1, 0.7)]  # (sigma, sigma_next, eta): high to low noise
    for k, (sigma, sigma_next, eta) in enumerate(sigmas):
        m, shape = 6, (2, 3, 3)
        g = eta * (sigma / (1 - (0.9 if sigma == 1 else sigma))) ** 0.5  # Flow-GRPO's std_dev_t (sigma_max at 1)
        sqrt_dt = (sigma - sigma_next) ** 0.5
        old_mean = torch.randn(m, *shape, generator=gen, dtype=torch.float64)
        drift = 10.0 ** (-2 - k) * torch.randn(m, *shape, generator=gen, dtype=torch.float64)
        out.append(
            {
                "log_prob": (0.3 * torch.randn(m, generator=gen, dtype=torch.float64)).tolist(),
                "old_log_prob": (0.3 * torch.randn(m, generator=gen, dtype=torch.float64)).tolist(),
                "advantages": [2.0, -1.5, 0.5, -0.25, 6.0, -7.0],  # the last two clamped at +-5
                "old_mean": old_mean.tolist(),
                "mean": (old_mean + drift).tolist(),
                "g": g,
                "sqrt_dt": sqrt_dt,
                "clip_range": [0.15, 0.05, 0.02][k],
                "adv_clip_max": 5.0,
            }
        )
    return out


def run(compute_loss, case: dict[str, Any]) -> dict[str, Any]:
    m = len(case["log_prob"])
    log_prob = torch.tensor(case["log_prob"], dtype=torch.float64, requires_grad=True)
    mean = torch.tensor(case["mean"], dtype=torch.float64, requires_grad=True)
    cfg = SimpleNamespace(
        diffusion_loss=SimpleNamespace(clip_ratio=case["clip_range"], adv_clip_max=case["adv_clip_max"])
    )
    loss, metrics = compute_loss(
        old_log_prob=torch.tensor(case["old_log_prob"], dtype=torch.float64),
        log_prob=log_prob,
        advantages=torch.tensor(case["advantages"], dtype=torch.float64),
        config=cfg,
        old_prev_sample_mean=torch.tensor(case["old_mean"], dtype=torch.float64),
        prev_sample_mean=mean,
        std_dev_t=torch.full((m, 1, 1, 1), case["g"], dtype=torch.float64),
        sqrt_dt=torch.full((m,), case["sqrt_dt"], dtype=torch.float64),
    )
    grad_log_prob, grad_mean = torch.autograd.grad(loss, (log_prob, mean))
    return {
        "loss": loss.item(),
        "ratio_mean": metrics["actor/ratio_mean"],
        "clipfrac": metrics["actor/pg_clipfrac"],
        "grad_log_prob": grad_log_prob.tolist(),
        "grad_mean": grad_mean.tolist(),
    }


def main() -> None:
    compute_loss = reference_compute_loss(sys.argv[1])
    values = [{"inputs": c, "expected": run(compute_loss, c)} for c in cases()]
    meta = {"repository": REPO, "commit": COMMIT, "file": FILE, "function": "GRPOGuardLoss.compute_loss"}
    OUT.write_text(json.dumps({"reference": meta, "cases": values}, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
