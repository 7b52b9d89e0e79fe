"""The one trainer loop every method plugs into: rollout -> reward -> advantages -> updates (methods/base.py).

It owns what is common to all methods: seeding, the optimizer and gradient clipping, the NaN/Inf guard, phase
timers and transformer-pass counters, metrics, image grids and the reward curve.
"""
from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf

from launcher.errors import ConfigError
from launcher.plots import plot_reward_curve, save_image_grid
from launcher.run_logger import RunLogger
from launcher.validate import validate
from models.nfe_counter import NFECounter

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


class PhaseTimer:
    """Accumulates wall-clock seconds per phase of a step."""

    def __init__(self):
        self.seconds: dict[str, float] = {}

    def __call__(self, phase: str):
        timer = self

        class _Ctx:
            def __enter__(self):
                self.t0 = time.perf_counter()

            def __exit__(self, *exc):
                timer.seconds[phase] = timer.seconds.get(phase, 0.0) + time.perf_counter() - self.t0

        return _Ctx()


def step_seed(seed: int, step: int, rank: int = 0) -> int:
    """Sampling noise of a step depends only on (seed, step, rank), so a resumed run redraws the same noise."""
    return (seed * 1_000_003 + step) * 1_009 + rank


class Trainer:
    def __init__(self, cfg: DictConfig, info: RunInfo):
        self.prompts = validate(cfg)           # fails fast, before any model is built
        self.cfg, self.info = cfg, info
        t = cfg.trainer
        if t.threads:
            torch.set_num_threads(int(t.threads))
        torch.manual_seed(t.seed)
        self.world_size = 1

        method_cls = get_class(cfg.method._target_)
        self.backbone = instantiate(cfg.model, keep_reference=method_cls.needs_reference(cfg.method))
        self.method = method_cls(cfg.method, self.backbone)
        self.reward = instantiate(cfg.reward).to(self.backbone.device).eval().requires_grad_(False)
        self.data = instantiate(cfg.data, seed=t.seed)
        self.params = list(self.backbone.trainable_parameters())
        if not self.params:
            raise ConfigError("the model has no trainable parameters: check model.finetune / model.lora_targets")
        self.optimizer = instantiate(cfg.optimizer)(self.params)
        self.counter = NFECounter(self.backbone.transformer_modules())
        self.logger = RunLogger(info.run_dir, self._build_backend())
        self.nonfinite_in_a_row = 0
        self.wallclock = 0.0
        n_params = sum(p.numel() for p in self.params)
        log.info("method=%s model=%s reward=%s | %d trainable parameters | %d samples/step | run dir %s",
                 cfg.method.name, cfg.model.name, cfg.reward.name, n_params, self.method.samples_per_step,
                 info.run_dir)

    def _build_backend(self):
        lcfg = self.cfg.logger
        if lcfg.get("_target_") is None:
            return None
        cfg_dict = OmegaConf.to_container(self.cfg, resolve=True)
        tags = list(dict.fromkeys([self.cfg.method.name, self.cfg.model.name, self.cfg.reward.name,
                                   *self.info.tags, *lcfg.tags]))
        kwargs = OmegaConf.to_container(lcfg, resolve=True)
        cls = get_class(kwargs.pop("_target_"))
        kwargs.update(group=lcfg.group or self.info.group or self.cfg.method.name, tags=tags,
                      run_name=lcfg.run_name or self.info.run_name)
        # the run config holds nested _target_ keys, so it must not go through hydra's recursive instantiate
        return cls(run_dir=self.info.run_dir, run_config=cfg_dict, **kwargs)

    # -- one step -----------------------------------------------------------------------------------------------
    def train_step(self, step: int) -> dict[str, float]:
        cfg, method = self.cfg, self.method
        timer = PhaseTimer()
        t_start = time.perf_counter()
        fwd0, bwd0 = self.counter.snapshot()
        generator = torch.Generator().manual_seed(step_seed(cfg.trainer.seed, step))
        prompts = self.data.batch(step, int(cfg.method.prompts_per_step))

        with timer("rollout"):
            rollout = method.rollout(prompts, generator)
        with timer("reward"):
            rewards = method.score(rollout, self.reward)
        metrics: dict[str, float] = {
            "step": step,
            "reward/mean": float(rewards.mean()),
            "reward/std": float(rewards.std()) if rewards.numel() > 1 else 0.0,
        }
        skipped = 0
        with timer("update"):
            if not bool(torch.isfinite(rewards).all()):
                skipped = 1
                log.warning("step %d: non-finite reward (%d of %d samples); update skipped", step,
                            int((~torch.isfinite(rewards)).sum()), rewards.numel())
            else:
                metrics.update(method.prepare_update(rollout))
                skipped, update_metrics = self._run_updates(rollout, generator)
                metrics.update(update_metrics)
        # components may report extra per-step metrics (e.g. reward/<component>, jagg/cos_group_<g>)
        metrics.update(self.reward.step_metrics())
        metrics.update(method.step_metrics())
        metrics["health/skipped_updates"] = skipped
        self.nonfinite_in_a_row = self.nonfinite_in_a_row + 1 if skipped else 0

        step_s = time.perf_counter() - t_start
        self.wallclock += step_s
        fwd1, bwd1 = self.counter.snapshot()
        metrics.update({
            "lr": self.optimizer.param_groups[0]["lr"],
            "time/rollout_s": timer.seconds.get("rollout", 0.0),
            "time/reward_s": timer.seconds.get("reward", 0.0),
            "time/update_s": timer.seconds.get("update", 0.0),
            "time/step_s": step_s,
            "time/wallclock_s": self.wallclock,
            "time/gpu_hours": self.world_size * self.wallclock / 3600.0,
            "count/transformer_fwd": fwd1 - fwd0,
            "count/transformer_bwd": bwd1 - bwd0,
        })
        self.logger.log(metrics)
        every = cfg.trainer.sample_every
        if every and (step % every == 0 or step == cfg.trainer.steps - 1):
            self._log_samples(rollout, step)
        if self.nonfinite_in_a_row >= cfg.trainer.max_nonfinite_in_a_row:
            raise TrainingAborted(
                f"{self.nonfinite_in_a_row} steps in a row had a NaN/Inf reward, loss or gradient, so their updates "
                f"were skipped (trainer.max_nonfinite_in_a_row={cfg.trainer.max_nonfinite_in_a_row}). Fix: lower "
                f"optimizer.lr, keep trainer.max_grad_norm > 0, check the reward on the run's sample images "
                f"({self.info.run_dir / 'samples'}).")
        return metrics

    def _run_updates(self, rollout, generator) -> tuple[int, dict[str, float]]:
        """All optimizer updates of one rollout; returns (number of skipped updates, averaged statistics)."""
        sums: dict[str, float] = {}
        grad_norms, n_samples, skipped = [], 0, 0
        for update in self.method.update_plan(rollout, generator):
            update_size = sum(len(mb) for mb in update)
            stats: dict[str, float] = {}
            for mb in update:
                for k, v in self.method.backward(rollout, mb, update_size).items():
                    stats[k] = stats.get(k, 0.0) + v
            norm = self._grad_norm()
            if stats.pop("nonfinite", 0.0) or not math.isfinite(norm):
                skipped += 1
                log.warning("non-finite loss or gradient (grad norm %s); optimizer step skipped", norm)
                self.optimizer.zero_grad(set_to_none=True)
                continue
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            grad_norms.append(norm)
            n_samples += update_size
            for k, v in stats.items():
                sums[k] = sums.get(k, 0.0) + v
        out = {k: v / max(n_samples, 1) for k, v in sums.items()}
        if grad_norms:
            out["grad_norm"] = sum(grad_norms) / len(grad_norms)
        return skipped, out

    def _grad_norm(self) -> float:
        max_norm = float(self.cfg.trainer.max_grad_norm)
        grads = [p for p in self.params if p.grad is not None]
        if not grads:
            return 0.0
        if max_norm > 0:
            return float(torch.nn.utils.clip_grad_norm_(grads, max_norm))
        return float(torch.nn.utils.get_total_norm([p.grad for p in grads]))

    def _log_samples(self, rollout, step: int) -> None:
        g = int(self.cfg.method.group_size)
        k = min(self.cfg.trainer.num_sample_images, len(rollout))
        # one image per prompt first (the groups' first members), then the rest, so grids show the prompts
        order = list(range(0, len(rollout), g)) + [i for i in range(len(rollout)) if i % g]
        idx = order[:k]
        path = save_image_grid(rollout.images[idx], self.info.run_dir / "samples" / f"step_{step:05d}.png")
        caption = " | ".join(f"{rollout.prompts[i]} ({float(rollout.rewards[i]):.3f})" for i in idx)
        self.logger.log_image("samples", path, step, caption)

    # -- the run ------------------------------------------------------------------------------------------------
    def fit(self) -> float:
        """Train ``trainer.steps`` steps; returns the final ``reward/mean`` (the value sweepers optimise)."""
        from tqdm.auto import tqdm

        steps = int(self.cfg.trainer.steps)
        bar = tqdm(range(steps), desc=f"{self.cfg.method.name}", disable=not self.cfg.trainer.progress,
                   dynamic_ncols=True)
        exit_code = 1
        try:
            for step in bar:
                m = self.train_step(step)
                bar.set_postfix(reward=f"{m['reward/mean']:.4f}", s_per_step=f"{m['time/step_s']:.2f}")
            exit_code = 0
        finally:
            self._finish(exit_code)
        return float(self.logger.history[-1]["reward/mean"])

    def _finish(self, exit_code: int) -> None:
        if self.logger.history:
            plot_reward_curve(self.logger.history, self.info.run_dir / "reward_curve.png",
                              title=f"{self.cfg.method.name} · {self.cfg.model.name} · {self.cfg.reward.name}")
        backend = self.logger.backend
        self.logger.finish(exit_code)
        where = f"; W&B ({backend.mode}): {backend.location}" if backend is not None else ""
        log.info("run dir %s: metrics.jsonl, reward_curve.png, samples/%s", self.info.run_dir, where)
