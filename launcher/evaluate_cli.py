"""The ``rewardflow-eval`` command (also ``python -m launcher.evaluate_cli``): score weights without training.

It takes the same Hydra overrides as ``rewardflow`` (conf/evaluate.yaml composes the same groups), and scores what
``evaluate.weights`` names (launcher/evaluate_config.py): the base model, an export, a checkpoint, or every
checkpoint of a run, with the in-training evaluation itself (:class:`launcher.train.evaluation.Evaluator`: the
held-out prompts, the fixed noise per (prompt, sample), the family's ODE sampler, the trained reward and
``eval.rewards``), so its scores equal, bit for bit on the CPU, those the run logged for the same weights. With no
arguments it scores the demo's base model on the demo's held-out prompts.

A source's evaluation step is what the training run would call it: 0 for the base model, ``N + 1`` for the
checkpoint ``step_<N>`` (the weights after N + 1 training steps), 0 for an export (which records no step). Each
source's row (``step``, ``eval/<reward>/mean|std``, ``time/*``) goes to ``metrics.jsonl`` and W&B (job type ``eval``),
and ``eval.json`` in the run dir gathers them with what was scored and how (docs/evaluation.md); each source's
samples are in ``samples/eval_<step>.png`` (the grid) and ``samples/eval_<step>/`` (one file each).

Under ``cluster=slurm`` / ``local_multi`` it runs like a training job: every rank builds the model (sharded with
FSDP as training shards it), samples its share of the (prompt, sample) pairs and writes their files; rank 0 gathers
the scores and writes the rest.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from launcher import installation, override_guard
from launcher.cfg_print import hydra_cfg_resolved_in_context
from launcher.cli import _quiet_libraries, _report, config_error_in
from launcher.cli_help import completion_filter
from launcher.config import register_configs

installation.guard()
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
register_configs()
log = logging.getLogger("rewardflow")

#: the file in the run dir that gathers the scores of every source (docs/evaluation.md#evaluating-without-training)
RESULTS_FILE = "eval.json"
#: how the initial latent of sample j of a prompt is seeded (launcher.train.evaluation.noise_seed)
NOISE_RULE = 'sha256("rewardflow-eval\\0" + prompt + "\\0" + str(j)), its first 8 bytes little-endian, & (2**63 - 1)'


def run(cfg: DictConfig, run_dir: Path | None = None) -> dict[str, Any]:
    """Score every source ``evaluate.weights`` names; write ``eval.json``; return its content (on every rank)."""
    from launcher.evaluate_config import weights_sources

    if run_dir is None:
        from hydra.core.hydra_config import HydraConfig

        run_dir = Path(HydraConfig.get().runtime.output_dir)
    cfg.eval.every = max(int(cfg.eval.every), 1)  # evaluates whatever eval.every says; the checks expect it on
    _quiet_libraries()
    try:
        from launcher.validate import validate

        validate(cfg)  # the checks a training run of this config gets, eval.* and evaluate.* included
        sources = weights_sources(str(cfg.evaluate.weights))
        return _evaluate(cfg, run_dir, sources)
    except Exception as e:  # noqa: BLE001 - a config error (or one Hydra wrapped) ends with its one paragraph
        cause = config_error_in(e)
        if cause is None:
            raise
        _report(f"config error: {cause}", 2)


def _evaluate(cfg: DictConfig, run_dir: Path, sources: list[tuple[str, Path | None]]) -> dict[str, Any]:
    import torch

    from launcher.checkpoint.weights import load_weights
    from launcher.cluster.device_check import default_threads, placement, rank_and_world_size
    from launcher.cluster.mesh import build_mesh
    from launcher.cluster.node_cache import cache_builders_first
    from launcher.components import build
    from launcher.plan.start_check import check_at_start
    from launcher.tracking.run_logger import RunLogger
    from launcher.tracking.run_names import EVAL_JOB_TYPE
    from launcher.train.ema import ParameterEMA
    from launcher.train.evaluation import Evaluator, held_out_prompts
    from rewardflow.distributed import init_distributed, submitit_job_env
    from rewardflow.errors import ConfigError

    if cfg.cluster.name != "local" and submitit_job_env() is None:
        raise ConfigError(
            f"cluster={cfg.cluster.name} runs its ranks through Hydra's submitit launcher, but this process is not a "
            f"submitit task. Fix: launch with `rewardflow-eval -m ...`, or use cluster=local"
        )
    rank, world_size = rank_and_world_size()
    if rank == 0:
        log.info("%s | run dir %s", placement(cfg, world_size), run_dir)
    world = init_distributed(int(cfg.cluster.get("collective_timeout_s", 600)))
    t = cfg.trainer
    # as the trainer does: the same threads (CPU sums are bitwise only with the same split) and the same seeds
    local_size = int(os.environ.get("LOCAL_WORLD_SIZE", world.world_size if world.world_size > 1 else 1))
    torch.set_num_threads(int(t.threads) or default_threads(local_size))
    torch.manual_seed(int(t.seed) + world.rank)
    if not world.is_main:
        logging.getLogger().setLevel(logging.WARNING)

    start = check_at_start(cfg, world)
    with cache_builders_first(cfg.cluster.get("cache_dir"), world):
        backbone = build(start.model, "model", keep_reference=False)
    export_info = None
    kinds = {kind for kind, _ in sources}
    if "export" in kinds:  # full weights, before the model is sharded
        if not hasattr(backbone, "load_export"):
            raise ConfigError(
                f"evaluate.weights={cfg.evaluate.weights}: model={cfg.model.name} has no export format. Fix: score "
                f"its checkpoints (evaluate.weights=<run dir>)"
            )
        export_info = backbone.load_export(sources[0][1])
    if world.world_size > 1:
        backbone.parallelize(build_mesh(cfg.cluster, world, backbone.device.type))
    if cfg.model.get("text_encoders") == "precompute":
        backbone.precompute_text(held_out_prompts(cfg))
    reward = build(cfg.reward, "reward").to(backbone.device).eval().requires_grad_(False)
    params = list(backbone.trainable_parameters())
    use_ema = bool(cfg.eval.use_ema)
    ema = ParameterEMA(backbone.transformer, params, float(t.ema_decay), False) if use_ema else None

    backend = _backend(cfg, run_dir, EVAL_JOB_TYPE) if world.is_main else None
    logger = RunLogger(run_dir, backend, enabled=world.is_main)
    evaluator = Evaluator(cfg, backbone, reward, world, logger, run_dir, ema)
    results = []
    for kind, path in sources:
        wallclock, step, checkpoint_step = 0.0, 0, None
        if kind == "checkpoint":
            assert path is not None
            meta = load_weights(path, backbone.transformer, ema)
            checkpoint_step = int(meta["step"])
            step, wallclock = checkpoint_step + 1, float(meta.get("wallclock_s", 0.0))
        row = evaluator.run(step, wallclock)
        results.append(
            {
                "weights": kind,
                "path": None if path is None else str(Path(path).resolve()),
                "checkpoint_step": checkpoint_step,
                "step": step,
                "ema": use_ema,
                **({"export": export_info} if kind == "export" else {}),
                "metrics": {k: v for k, v in row.items() if k.startswith(("eval/", "val/"))},
                # its first eval.log_samples samples, one file each, and their samples.jsonl (none: eval.log_samples=0)
                "samples": str(evaluator.media_dir(step).relative_to(run_dir)) if evaluator.media_count else None,
                "time/eval_s": row["time/eval_s"],
            }
        )
    e = cfg.eval
    out = {
        "evaluate.weights": str(cfg.evaluate.weights),
        "model": str(cfg.model.name),
        "rewards": list(evaluator.rewards),
        "prompts": evaluator.prompts,
        "samples_per_prompt": int(e.samples_per_prompt),
        "sampler": {
            "kind": "the family's deterministic ODE sampler (methods/family_sampler.py)",
            "sampling_steps": int(e.sampling_steps),
            "guidance": None if e.guidance is None else float(e.guidance),
        },
        "noise_seed": NOISE_RULE,
        "world_size": world.world_size,
        "results": results,
    }
    if world.is_main:
        (run_dir / RESULTS_FILE).write_text(json.dumps(out, indent=2) + "\n")
        logger.finish(0)
        log.info("scores of %d source(s) written to %s", len(results), run_dir / RESULTS_FILE)
    return out


def _backend(cfg: DictConfig, run_dir: Path, job_type: str):
    """The dashboard run (W&B, ``logger=wandb``) of this evaluation, named like a training run's."""
    from launcher.components import build
    from launcher.tracking.run_names import dashboard_names

    lcfg = cfg.logger
    if lcfg.get("_target_") is None:
        return None
    names = dashboard_names(lcfg, ["eval", cfg.model.name, cfg.reward.name], None, None, job_type=job_type)
    return build(
        lcfg,
        "logger",
        run_dir=run_dir,
        run_config=OmegaConf.to_container(cfg, resolve=True, enum_to_str=True),
        group=names.group,
        tags=names.tags,
        run_name=names.name,
        job_type=names.job_type,
        run_id=None,
    )


@hydra.main(version_base="1.3", config_path=installation.config_path(), config_name="evaluate")
def _hydra_main(cfg: DictConfig) -> float:
    out = run(cfg)
    first = out["results"][-1]["metrics"] if out.get("results") else {}
    return float(first.get(f"eval/{cfg.reward.name}/mean", float("nan")))


def main() -> None:
    """The entry point of ``rewardflow-eval``."""
    args = sys.argv[1:]
    refused = override_guard.refusal(args) or override_guard.grammar_problem(args)
    if refused:
        print(f"rewardflow: config error: {refused}", file=sys.stderr)
        sys.exit(2)
    with completion_filter(args), hydra_cfg_resolved_in_context(args):
        _hydra_main()


if __name__ == "__main__":
    main()
