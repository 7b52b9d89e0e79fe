"""The one trainer loop every method plugs into: rollout -> reward -> advantages -> updates (methods/base.py).

It owns what is common to all methods: seeding, the optimizer, its learning-rate schedule and gradient clipping,
the EMA of the weights, the NaN/Inf guard, phase timers and transformer-pass counters, metrics, image grids, the
held-out evaluation (launcher/train/evaluation.py) and the reward curve.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from launcher.checkpoint import preemption, run_identity
from launcher.checkpoint.manager import CheckpointManager
from launcher.checkpoint.resume import copy_history, load_start_point
from launcher.checkpoint.run_lock import lock_run_dir
from launcher.cluster.device_check import default_threads, placement, placement_record, rank_and_world_size
from launcher.cluster.mesh import build_mesh, describe
from launcher.cluster.node_cache import cache_builders_first
from launcher.components import build, component_class
from launcher.plan.start_check import check_at_start
from launcher.tracking import placement_file
from launcher.tracking.closing_line import closing_line
from launcher.tracking.media import (
    SAMPLE_IMAGES_KEY,
    SAMPLE_VIDEOS_KEY,
    MediaFile,
    file_stem,
    save_sample,
    write_index,
)
from launcher.tracking.media import caption as media_caption
from launcher.tracking.phase_memory import PhaseMemory
from launcher.tracking.phase_timer import PhaseTimer
from launcher.tracking.plots import plot_reward_curve, sample_order, save_image_grid
from launcher.tracking.run_logger import RunLogger
from launcher.tracking.run_names import dashboard_names
from launcher.tracking.step_log import StepLog, progress_bar_shown
from launcher.train.ema import ParameterEMA
from launcher.train.evaluation import Evaluator, held_out_prompts
from launcher.train.health import StepHealth, aborted
from launcher.train.lr_schedule import build_lr_schedule, build_optimizer, rebase
from launcher.train.update_loop import UpdateLoop
from launcher.validate import validate
from models.prompt_truncation import truncation_warning
from rewardflow.distributed import (
    all_gather_cat,
    all_reduce_sum,
    broadcast_object,
    collective_device,
    init_distributed,
    submitit_job_env,
)
from rewardflow.errors import ConfigError
from rewardflow.nfe_counter import NFECounter
from rewardflow.prompts import held_out_count, held_out_key

log = logging.getLogger(__name__)


class TrainingAborted(RuntimeError):
    """Raised when too many consecutive updates had to be skipped; the message says why and what to try."""


@dataclass
class RunInfo:
    """Where and under which names a run is recorded (filled from Hydra's runtime by the CLI)."""

    run_dir: Path
    run_name: str | None = None
    group: str | None = None
    tags: list[str] = field(default_factory=list)
    overrides: list[str] = field(default_factory=list)  # the command line's, recorded with the run's identity


def step_seed(seed: int, step: int, rank: int = 0) -> int:
    """Sampling noise of a step depends only on (seed, step, rank), so a resumed run redraws the same noise."""
    return ((seed * 1_000_003 + step) * 1_009 + rank) % 2**64  # torch takes 64-bit seeds: any trainer.seed works


class Trainer:
    def __init__(self, cfg: DictConfig, info: RunInfo):
        self.prompts = validate(cfg)  # fails fast, before any model is built
        self.cfg, self.info = cfg, info
        t = cfg.trainer
        if cfg.cluster.name != "local" and submitit_job_env() is None:
            raise ConfigError(
                f"cluster={cfg.cluster.name} runs its ranks through Hydra's submitit launcher, but "
                f"this process is not a submitit task. Fix: launch with `rewardflow -m ...` (the "
                f"cluster config sets hydra.mode=MULTIRUN), or use cluster=local"
            )
        rank, world_size = rank_and_world_size()
        if rank == 0:  # the run's first line, before the ranks' process-group lines
            log.info("%s | run dir %s", placement(cfg, world_size), info.run_dir)
        self.world = init_distributed(int(cfg.cluster.get("collective_timeout_s", 600)))
        self.run_lock = lock_run_dir(info.run_dir, self.world)  # one run per run dir (launcher/checkpoint/run_lock.py)
        run_identity.check_own_run(cfg, info.run_dir)  # another run's dir is refused before anything is read or moved
        if cfg.method.prompts_per_step % self.world.world_size:
            raise ConfigError(
                f"method.prompts_per_step={cfg.method.prompts_per_step} must be divisible by the "
                f"{self.world.world_size} ranks (each rank samples whole prompt groups)"
            )
        local_size = int(os.environ.get("LOCAL_WORLD_SIZE", self.world.world_size if self.world.world_size > 1 else 1))
        torch.set_num_threads(int(t.threads) or default_threads(local_size))
        torch.manual_seed(t.seed + self.world.rank)  # per-rank seeds (sampling noise is seeded per step below)
        if not self.world.is_main:
            logging.getLogger().setLevel(logging.WARNING)

        method_cls, method_cfg = component_class(cfg.method, "method"), OmegaConf.to_object(cfg.method)
        start = check_at_start(cfg, self.world)  # auto settings from the plan; on GPUs it fits (launcher/plan)
        # rank 0 (with a node-local cluster.cache_dir: each node's first rank) fills the caches; the others read them
        with cache_builders_first(cfg.cluster.get("cache_dir"), self.world):
            self.backbone = build(start.model, "model", keep_reference=method_cls.needs_reference(method_cfg))
        truncated = truncation_warning(self.backbone, self.prompts, cfg.model.name) if self.world.is_main else None
        if truncated:
            log.warning(truncated)
        if self.world.world_size > 1:
            mesh = build_mesh(cfg.cluster, self.world, self.backbone.device.type)
            self.backbone.parallelize(mesh)
            log.info("FSDP2 mesh: %s", describe(mesh))
        if cfg.model.get("text_encoders") == "precompute":  # the encoders are freed: the held-out prompts too
            self.backbone.precompute_text(self.prompts + (held_out_prompts(cfg) if cfg.eval.every else []))
        self.method = method_cls(method_cfg, self.backbone)
        self.reward = build(cfg.reward, "reward").to(self.backbone.device).eval().requires_grad_(False)
        self.data = build(
            cfg.data, "data", seed=t.seed, held_out=held_out_count(cfg.eval), held_out_key=held_out_key(cfg.eval)
        )
        self.params = list(self.backbone.trainable_parameters())
        if not self.params:
            raise ConfigError("the model has no trainable parameters: check model.finetune / model.lora_targets")
        self.optimizer = build_optimizer(cfg.optimizer, self.params)
        self.lr_schedule = build_lr_schedule(self.optimizer, cfg.optimizer, int(t.steps))
        decay, warmup = float(t.ema_decay), bool(t.ema_warmup)
        self.ema = ParameterEMA(self.backbone.transformer, self.params, decay, warmup) if decay else None
        self.memory = PhaseMemory(start.plan, start.on_gpu)  # measured peak per phase beside the plan (memory/*)
        self.updates = UpdateLoop(
            self.method, self.optimizer, self.params, float(t.max_grad_norm), after_step=self._update_ema
        )
        self.counter = NFECounter(self.backbone.transformer_modules())
        self.checkpoints = CheckpointManager(
            info.run_dir / "checkpoints",
            self.world,
            int(t.keep_last_ckpts),
            asynchronous=bool(t.async_checkpoint),
            checksums=bool(t.checkpoint_checksums),
        )
        self.preemption = preemption.install(float(cfg.cluster.get("signal_delay_s", 0)))
        self.nonfinite_in_a_row = 0
        self.health = StepHealth(self.params, float(t.max_weight_growth))
        self.wallclock = 0.0
        self.start_step = 0
        wandb_id = self._resume()
        self.health.start()  # the weights' norm the run starts (or resumes) from
        if self.world.is_main:  # the run dir now belongs to this run (launcher/checkpoint/run_identity.py)
            run_identity.write(info.run_dir, cfg, info.overrides)
            self.placement = placement_file.write(info.run_dir, placement_record(cfg, self.world.world_size))
        self.logger = RunLogger(
            info.run_dir,
            self._build_backend(wandb_id) if self.world.is_main else None,
            resume=self.start_step > 0,
            enabled=self.world.is_main,
        )
        self.evaluator = (
            Evaluator(
                cfg,
                self.backbone,
                self.reward,
                self.world,
                self.logger,
                info.run_dir,
                self.ema if cfg.eval.use_ema else None,
            )
            if cfg.eval.every
            else None
        )
        n_params = sum(p.numel() for p in self.params)
        log.info(
            "method=%s model=%s reward=%s | %d trainable parameters | %d samples/step on %d rank(s) | run dir %s",
            cfg.method.name,
            cfg.model.name,
            cfg.reward.name,
            n_params,
            self.method.samples_per_step,
            self.world.world_size,
            info.run_dir,
        )

    # -- checkpoints --------------------------------------------------------------------------------------------
    def _wandb_id_file(self) -> Path:
        return self.info.run_dir / "wandb_run_id"

    def _resume(self) -> str | None:
        """Load the run's start point (launcher/checkpoint/resume.py); return the W&B run id to continue, if any."""
        start = load_start_point(
            self.cfg,
            self.checkpoints,
            self.backbone.transformer,
            self.optimizer,
            extra=self.method.state_dict(),
            states=self._states(),
        )
        own_id = self._wandb_id_file()
        wandb_id = own_id.read_text().strip() if self.cfg.trainer.resume and own_id.exists() else None
        if start is None:  # step 0: an earlier attempt's history is moved aside, and never shares its W&B run
            earlier = self.info.run_dir / "metrics.jsonl"
            return None if earlier.is_file() and earlier.stat().st_size else wandb_id
        if self.ema is not None and "ema" not in start.meta.get("states", []):
            log.warning("checkpoint %s holds no EMA of the weights: the EMA restarts from them", start.checkpoint)
            t = self.cfg.trainer
            self.ema = ParameterEMA(self.backbone.transformer, self.params, float(t.ema_decay), bool(t.ema_warmup))
        self.start_step = int(start.meta["step"]) + 1
        self.wallclock = float(start.meta.get("wallclock_s", 0.0))
        log.info("resuming at step %d from %s", self.start_step, start.checkpoint)
        if start.own_run:
            return start.meta.get("wandb_run_id") or wandb_id
        rebase(self.optimizer, self.lr_schedule, self.cfg.optimizer)  # this run's rate, not the other run's
        if self.world.is_main:  # another run's checkpoint: a new W&B run, its curve from step 0
            copy_history(start, self.info.run_dir)
            own_id.unlink(missing_ok=True)
        return None

    def save_checkpoint(self, step: int) -> Path | None:
        """Collective: a checkpoint of ``step``, unless that step left the model unhealthy (launcher/train/health.py):
        then None, and the last good checkpoint stays the newest."""
        if not self.health.last_ok:
            log.warning("step %d is not checkpointed: its update was skipped or its weights are broken", step)
            return None
        backend = self.logger.backend
        meta = {
            **run_identity.record(self.cfg, self.info.overrides),
            "data_position": (step + 1) * int(self.cfg.method.prompts_per_step),
            "wallclock_s": self.wallclock,
            "wandb_run_id": broadcast_object(backend.run_id if backend is not None else None),
        }
        return self.checkpoints.save(
            step, self.backbone.transformer, self.optimizer, meta, extra=self.method.state_dict(), states=self._states()
        )

    def _states(self) -> dict:
        """What a checkpoint holds besides the weights, the optimizer and the method's state: the LR schedule, the
        EMA."""
        return {"lr_schedule": self.lr_schedule, **({"ema": self.ema} if self.ema is not None else {})}

    def _build_backend(self, run_id: str | None):
        lcfg = self.cfg.logger
        if lcfg.get("_target_") is None:
            return None
        defaults = [self.cfg.method.name, self.cfg.model.name, self.cfg.reward.name, *self.info.tags]
        names = dashboard_names(lcfg, defaults, self.info.group, self.info.run_name)  # W&B's variables honoured
        backend = build(
            lcfg,
            "logger",
            run_dir=self.info.run_dir,
            run_config={
                **OmegaConf.to_container(self.cfg, resolve=True, enum_to_str=True),  # type: ignore[dict-item]
                "placement": self.placement,  # what rewardflow-compare labels its compute axis by
            },
            group=names.group,
            tags=names.tags,
            run_name=names.name,
            job_type=names.job_type,
            run_id=run_id,
        )
        self._wandb_id_file().write_text(backend.run_id + "\n")  # a restart before any checkpoint reuses it
        return backend

    # -- one step -----------------------------------------------------------------------------------------------
    def train_step(self, step: int) -> dict[str, float]:
        cfg, method = self.cfg, self.method
        timer = PhaseTimer(self.backbone.device)  # CUDA events on GPUs, read below after the step's last sync
        t_start = time.perf_counter()
        fwd0, bwd0 = self.counter.snapshot()
        world = self.world
        generator = torch.Generator().manual_seed(step_seed(cfg.trainer.seed, step, world.rank))
        prompts = self.data.batch(step, int(cfg.method.prompts_per_step))[world.rank :: world.world_size]

        method.keep_images = self.samples_due(step)
        with timer("rollout"), self.memory("rollout"):
            rollout = method.rollout(prompts, generator)
        with timer("reward"), self.memory("reward"):
            method.score(rollout, self.reward)
        rewards = all_gather_cat(rollout.rewards.float())  # every rank sees the step's rewards
        metrics: dict[str, float] = {
            "step": step,
            "reward/mean": float(rewards.mean()),
            "reward/std": float(rewards.std()) if rewards.numel() > 1 else 0.0,
        }
        skipped = 0
        with timer("update"), self.memory("update"):
            if not bool(torch.isfinite(rewards).all()):
                skipped = 1
                log.warning(
                    "step %d: non-finite reward (%d of %d samples); update skipped",
                    step,
                    int((~torch.isfinite(rewards)).sum()),
                    rewards.numel(),
                )
            else:
                metrics.update(method.prepare_update(rollout))
                skipped, update_metrics = self.updates.run(rollout, generator)
                metrics.update(update_metrics)
            method.end_step(step)
        # components may report extra per-step metrics (e.g. reward/<component>, jagg/cos_group_<g>)
        metrics.update(self.reward.step_metrics())
        metrics.update(method.step_metrics())
        metrics["health/skipped_updates"] = skipped
        weights_problem = self.health.after_step(skipped, metrics)  # launcher/train/health.py
        if weights_problem:
            log.warning("step %d: %s; this step is not checkpointed", step, weights_problem)
        self.nonfinite_in_a_row = self.nonfinite_in_a_row + 1 if skipped or weights_problem else 0

        fwd1, bwd1 = self.counter.snapshot()
        counts = all_reduce_sum(
            torch.tensor([fwd1 - fwd0, bwd1 - bwd0], dtype=torch.float64, device=collective_device())
        ).tolist()  # with NCCL a sync; read() waits for the last phase's event: the step's kernels are done now
        phase_s = timer.read()
        step_s = time.perf_counter() - t_start  # after the wait, so the wall clock holds the step's device work
        self.wallclock += step_s
        metrics.update(
            {
                "lr": self.optimizer.param_groups[0]["lr"],
                **{f"time/{phase}_s": phase_s.get(phase, 0.0) for phase in ("rollout", "reward", "update")},
                "time/step_s": step_s,
                "time/wallclock_s": self.wallclock,
                "time/gpu_hours": self.world.world_size * self.wallclock / 3600.0,
                "count/transformer_fwd": int(counts[0]),  # summed over ranks: the step's total transformer work
                "count/transformer_bwd": int(counts[1]),
                **self.memory.metrics(),  # CUDA only: docs/metrics.md
            }
        )
        self.lr_schedule.step()  # the next step's learning rate (``lr`` is this step's)
        self.logger.log(metrics)
        if self.samples_due(step):
            self._log_samples(rollout, step)
        if self.nonfinite_in_a_row >= cfg.trainer.max_nonfinite_in_a_row:
            raise TrainingAborted(
                aborted(self.nonfinite_in_a_row, cfg.trainer.max_nonfinite_in_a_row, self.info.run_dir)
            )
        return metrics

    def _update_ema(self) -> None:
        """After each optimizer step: the EMA of the weights follows them (``trainer.ema_decay``)."""
        if self.ema is not None:
            self.ema.update()

    def samples_due(self, step: int) -> bool:
        """Whether this step draws an image grid (``trainer.sample_every``; always the last step), on the main rank."""
        every, last = self.cfg.trainer.sample_every, self.cfg.trainer.steps - 1
        return bool(every) and self.world.is_main and (step % every == 0 or step == last)

    def _log_samples(self, rollout, step: int) -> None:
        """The step's image grid ``samples/step_<k>.png`` and each of its samples as a file of its own in
        ``samples/step_<k>/`` (a PNG, or a GIF for a video; launcher/tracking/media.py), to W&B as the grid and as
        one captioned image or video per sample (docs/wandb.md#samples-and-videos)."""
        idx = sample_order(len(rollout), int(self.cfg.method.group_size))[: self.cfg.trainer.num_sample_images]
        folder = self.info.run_dir / "samples" / f"step_{step:05d}"
        path = save_image_grid(rollout.images[idx], folder.with_name(f"{folder.name}.png"))
        caption = " | ".join(f"{rollout.prompts[i]} ({float(rollout.rewards[i]):.3f})" for i in idx)
        self.logger.log_image("samples", path, step, caption)
        fps = int(self.cfg.model.fps) if self.backbone.video else None
        reward, group_size = str(self.cfg.reward.name), int(self.cfg.method.group_size)
        files: list[MediaFile] = []
        index: list[dict] = []
        for position, i in enumerate(idx):
            prompt, score = rollout.prompts[i], float(rollout.rewards[i])
            written = save_sample(rollout.images[i], folder / file_stem(position, prompt), fps)
            files.append(MediaFile(written, media_caption(prompt, {reward: score})))
            index.append({"file": written.name, "prompt": prompt, "sample": i % group_size, reward: score})
        write_index(folder, index)
        self.logger.log_media(SAMPLE_VIDEOS_KEY if files[0].video else SAMPLE_IMAGES_KEY, files, step)

    # -- the run ------------------------------------------------------------------------------------------------
    def fit(self) -> float:
        """Train ``trainer.steps`` steps; returns the last logged ``trainer.objective`` (the value sweepers optimise)."""
        from tqdm.auto import tqdm

        t = self.cfg.trainer
        steps = int(t.steps)
        bar_shown = progress_bar_shown(t.progress, self.world.is_main)
        bar = tqdm(
            range(self.start_step, steps),
            desc=f"{self.cfg.method.name}",
            initial=self.start_step,
            total=steps,
            disable=not bar_shown,
            dynamic_ncols=True,
        )
        step_log = StepLog(t.log_every, steps, bar_shown, enabled=self.world.is_main)
        exit_code = 1
        try:
            for step in bar:
                self._evaluate(step)
                m = self.train_step(step)
                bar.set_postfix(reward=f"{m['reward/mean']:.4f}", s_per_step=f"{m['time/step_s']:.2f}")
                step_log(m)
                if self.run_lock is not None and self.run_lock.lost:
                    raise RuntimeError(
                        f"another process took this run dir's lock ({self.run_lock.lost}); "
                        f"stopping so that the two runs do not mix their files"
                    )
                last = step == steps - 1
                if self.preemption.should_stop():
                    self.save_checkpoint(step)
                    self.checkpoints.wait()  # written before the job hands over
                    self.logger.finish(exit_code=0)
                    self.preemption.hand_over(self.world.is_main)  # requeues (rank 0 exits here)
                    return float("nan")
                if t.ckpt_every and (step + 1) % t.ckpt_every == 0 and not last:
                    self.save_checkpoint(step)
            self._evaluate(steps)
            exit_code = 0
        finally:
            lost = self.run_lock is not None and self.run_lock.lost
            if (exit_code == 0 or not self.preemption.requested) and not lost:  # lost: the run dir is another's
                self._finish(exit_code)
            if self.run_lock is not None:
                self.run_lock.release()
        return self.objective()

    def objective(self) -> float:
        """The value a sweeper optimises: the last logged ``trainer.objective`` (default: the final held-out
        evaluation's score; launcher/tracking/objective.py); NaN when it was never logged or was not finite."""
        from launcher.tracking.objective import KEY, objective_value

        key = str(self.cfg.trainer.objective)
        value = objective_value(self.logger.history, key)
        if math.isnan(value) and self.world.is_main and self.info.group is not None:  # in a sweep
            log.warning("%s=%s: no finite value was logged; the run returns NaN to a sweeper", KEY, key)
        return value

    def _evaluate(self, step: int) -> None:
        """The held-out evaluation of the model after ``step`` training steps, when due (launcher/train/evaluation.py)."""
        if self.evaluator is not None:
            self.evaluator.maybe_run(step, self.wallclock)

    def _export(self) -> None:
        """The fine-tuned weights in the family's own format (a peft adapter or a diffusers transformer folder), next
        to the DCP checkpoints, which only rewardflow resumes from. Every rank calls it (sharded state is gathered)."""
        from models.backbone import Backbone

        if type(self.backbone).save_pretrained is Backbone.save_pretrained:
            if self.world.is_main:
                log.info(
                    "model=%s has no export format (trainer.export skipped); its DCP checkpoint holds the weights",
                    self.cfg.model.name,
                )
            return
        ema = self.cfg.trainer.export_ema
        # validated: export_ema needs ema_decay > 0 (launcher/train/ema.py)
        with self.ema.applied() if ema and self.ema is not None else contextlib.nullcontext():
            out = self.backbone.save_pretrained(self.info.run_dir / "export")
        if self.world.is_main:
            log.info(
                "exported the fine-tuned %sweights to %s (see rewardflow_export.json for how to load them)",
                "EMA " if ema else "",
                out,
            )

    def _finish(self, exit_code: int) -> None:
        if exit_code == 0 and self.cfg.trainer.steps > self.start_step:
            self.save_checkpoint(int(self.cfg.trainer.steps) - 1)  # the end state is a checkpoint too
        self.checkpoints.wait()  # an asynchronous save in flight is committed, even after a failure
        if exit_code == 0 and self.cfg.trainer.export:
            self._export()
        if not self.world.is_main:
            return
        if self.logger.history:
            plot_reward_curve(
                self.logger.history,
                self.info.run_dir / "reward_curve.png",
                title=f"{self.cfg.method.name} · {self.cfg.model.name} · {self.cfg.reward.name}",
                eval_key=f"eval/{self.cfg.reward.name}/mean",
            )
        self.logger.finish(exit_code)
        log.info(closing_line(self.info.run_dir, self.logger.backend))
