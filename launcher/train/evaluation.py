"""Held-out evaluation in the trainer: one ruler for every method (``eval.*``; docs/evaluation.md).

A method's training reward scores its own training samples (its sampler, its noise, one small batch per step), so
two methods' training curves are not measured alike. The evaluation scores every run the same way:

- **prompts**: held out of training, ``eval.prompts`` (a file or a list) or ``eval.split=N`` prompts of ``data``
  (a fixed split, :func:`launcher.train.data.split_prompts`);
- **noise**: ``eval.samples_per_prompt`` initial latents per prompt, each seeded by (prompt text, sample index)
  only, so the same for every method, seed and step (:func:`noise_seed`);
- **sampler**: the family's deterministic ODE sampler with its inference steps and guidance (``eval.sampling_steps``,
  ``eval.guidance``; :mod:`methods.family_sampler`), never the method's training sampler;
- **rewards**: the trained reward and ``eval.rewards`` (:func:`extra_rewards`; the CPU demo, ``data=demo``, adds
  brightness and diversity by default: conf/eval_rewards/offline.yaml), scored without gradients
  (:meth:`rewards.base.Reward.evaluate`);
  a per-prompt metric (``reward=diversity``) is reduced to one score per prompt once every rank's samples are gathered
  (:meth:`rewards.base.Reward.prompt_scores`), so its mean and std are over prompts;
- **validation**: ``eval.val_split=N`` also scores N of the training prompts the same way, as ``val/<reward>/mean``:
  a protocol picks its learning rate on them and reports the held-out score (docs/comparing.md#comparison-protocol).

Evaluation ``k`` measures the model after ``k`` training steps: ``k = 0`` (the base model), every ``eval.every``
steps, and ``k = trainer.steps`` (the end). Its row in ``metrics.jsonl`` has ``step = k``, ``eval/<reward>/mean``
and ``/std`` over all samples, ``time/eval_s``, and the compute axes ``time/wallclock_s`` / ``time/gpu_hours`` of
those k steps, which never include evaluation time. Its image grid (one image per prompt, the same noise every time)
goes to ``samples/eval_<k>.png`` and W&B. Under FSDP every rank samples its share of the (prompt, sample) pairs, in
lockstep (the sharded transformer's forward is collective), and the scores are gathered in a fixed order.

Evaluation never changes training: it draws no random numbers from the generators training uses (its own are
seeded per sample, and torch's global state is restored), it leaves the weights, the reward's state and the
transformer's train/eval mode as they were, and its time is kept out of the compute axes.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, ListConfig, OmegaConf

from launcher.components import build, component_class
from launcher.tracking.media import EVAL_TABLE_KEY, VIDEO_SUFFIX, MediaFile, file_stem, save_sample, write_index
from launcher.tracking.media import caption as media_caption
from launcher.tracking.plots import save_image_grid
from launcher.train.data import split_prompts
from methods.family_sampler import family_ode_sample, family_sigmas
from rewardflow.distributed import World, all_gather_objects, broadcast_object
from rewardflow.errors import ConfigError, ConfigErrors
from rewardflow.prompt_sets import SETS, PromptSet, Split, named_test_split, set_prompts
from rewardflow.prompts import data_prompts, held_out_count, held_out_key, load_prompts

log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------------- configuration
def held_out_prompts(cfg: Any, set_test_split: bool = True) -> list[str]:
    """The evaluation's prompts: ``eval.prompts`` (a .txt / .jsonl file read like ``data.path``, an inline list, or a
    named set's name: its test split), else the ``eval.split`` prompts held out of ``data`` (or data=file's
    ``eval.default_split``: :func:`rewardflow.prompts.held_out_count`), else the test split of
    the named set ``data.set`` trains on (``set_test_split=False``: not that one, which is downloaded on first use:
    the config check of a run that evaluates nothing); empty when none is set (docs/data.md#named-prompt-sets, docs/evaluation.md#keys)."""
    e = cfg.eval
    if e.prompts is not None:
        if isinstance(e.prompts, (list, ListConfig)):
            return load_prompts(list(e.prompts), None)
        if named_test_split(str(e.prompts)):
            return set_prompts(str(e.prompts), Split.test, key="eval.prompts")
        return load_prompts(None, str(e.prompts), cfg.data.field, cfg.data.encoding, key="eval.prompts")
    held_out = held_out_count(e)
    if held_out > 0:
        return split_prompts(data_prompts(cfg.data), held_out, held_out_key(e))[1]
    if set_test_split and cfg.data.set is not None and Split.test in SETS[PromptSet(cfg.data.set)].splits:
        return set_prompts(cfg.data.set, Split.test, key="data.set")
    return []


def validation_prompts(cfg: Any) -> list[str]:
    """The ``eval.val_split`` validation prompts: a fixed subset of the training prompts (the data prompts less the
    ``eval.split`` held-out ones, :func:`launcher.train.data.split_prompts`), so disjoint from the held-out prompts
    and trained on; empty when ``eval.val_split=0``."""
    n = int(cfg.eval.val_split)
    if n <= 0:
        return []
    train = split_prompts(data_prompts(cfg.data), held_out_count(cfg.eval), held_out_key(cfg.eval))[0]
    return split_prompts(train, n, key="eval.val_split")[1]


def extra_rewards(cfg: Any) -> dict[str, Any]:
    """The rewards of ``eval.rewards`` scored besides the trained one, by name: all of them, less an entry with the
    trained reward's name and the same settings, which is the trained reward itself (the demo's default
    ``eval.rewards.brightness`` when a run trains on ``reward=brightness``: conf/eval_rewards/offline.yaml), scored
    once. An entry of that name with other settings is refused by :meth:`Evaluator.check`."""
    trained = str(cfg.reward.name)
    return {
        str(n): r
        for n, r in (cfg.eval.rewards or {}).items()
        if not (n == trained and _settings(r) == _settings(cfg.reward))
    }


def _settings(reward_cfg: Any) -> Any:
    """A reward config (a typed dataclass or a DictConfig) as plain values, to compare two."""
    node = reward_cfg if isinstance(reward_cfg, DictConfig) else OmegaConf.structured(reward_cfg)
    return OmegaConf.to_container(node, resolve=True, enum_to_str=True)


def noise_seed(prompt: str, index: int) -> int:
    """Seed of the initial latent of sample ``index`` of ``prompt``: a function of the two only (not of the method,
    the run's seed, the step or the prompt's position in the list)."""
    digest = hashlib.sha256(f"rewardflow-eval\0{prompt}\0{index}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


# ---------------------------------------------------------------------------------------------------- evaluation
class Evaluator:
    """Runs the evaluations of one run (see the module docstring).

    Args:
        cfg: the run's config (``eval``, ``trainer``, ``reward``).
        backbone: the trained model; ``reward``: the trained reward (already built).
        world: this process's rank; ``logger``: the run's :class:`launcher.tracking.run_logger.RunLogger` (rank 0 writes).
        run_dir: where ``samples/eval_<k>.png`` go.
        ema: a :class:`launcher.train.ema.ParameterEMA` whose weights are evaluated instead (``eval.use_ema``), or None.
    """

    @classmethod
    def check(cls, cfg: Any, errors: ConfigErrors) -> None:
        """The evaluation's config check that needs the prompts, the model's code and the rewards' (run by
        :mod:`launcher.validate` before anything is built, after the components' own and after
        :meth:`launcher.train.eval_config.EvalConfig.check`, which holds the rules on values alone): ``cfg`` is the
        run's typed config. The rewards are checked on the held-out prompts only
        when nothing else failed (their own checks have then passed on the training prompts)."""
        e, clean = cfg.eval, not errors.messages  # the values alone were checked by EvalConfig.check
        prompts = None
        with errors.collect():
            prompts = held_out_prompts(cfg, set_test_split=bool(e.every))  # also checks eval.split against the data
            validation_prompts(cfg)  # and eval.val_split against the training prompts
        if not e.every or prompts is None:
            return
        with errors.collect():
            model_cls = component_class(cfg.model, "model")
            errors.require(
                e.guidance is None or getattr(model_cls, "guidance_attr", None) is not None,
                "eval.guidance",
                f"{e.guidance}: model={cfg.model.name} has no guidance. Fix: eval.guidance=null",
            )
        if not prompts or not clean:  # none set: EvalConfig.check said so (an empty list or file is refused on reading)
            return
        # every reward scored must suit the held-out prompts: check each as if it trained on them
        held_out = replace(cfg, data=replace(cfg.data, prompts=list(prompts), path=None))
        extra = extra_rewards(cfg)
        rewards = {f"reward={cfg.reward.name}": cfg.reward, **{f"eval.rewards.{n}": r for n, r in extra.items()}}
        for where, reward_cfg in rewards.items():
            if where.startswith("eval.rewards."):
                name = where.removeprefix("eval.rewards.")
                if not errors.require(
                    name != cfg.reward.name and "/" not in name,
                    where,
                    "the name is the trained reward's (with other settings) or not a metric name (eval/<name>/mean); "
                    f"rename it, or drop it: ~reward@{where}",
                ):
                    continue
            try:
                reward_cls = component_class(reward_cfg, where)
            except (ConfigError, AttributeError):
                errors.require(
                    False,
                    where,
                    f"its _target_ cannot be imported. Fix: compose it from a reward option, e.g. +reward@{where}=clip",
                )
                continue
            found = ConfigErrors()
            as_trained = replace(held_out, reward=reward_cfg)
            # its keys under their own name (eval.rewards.<name>.path=..., fix included), not the trained reward's
            view = found.under("reward", where) if where.startswith("eval.rewards.") else found
            for hook in (getattr(type(reward_cfg), "check", None), getattr(reward_cls, "check_with_code", None)):
                if callable(hook):  # its config's rules, then those that need the reward's code or files
                    hook(as_trained, view)
            for message in found.messages:
                whole = message.startswith((f"{where}: ", "reward: "))  # the reward as a whole: about the prompts
                errors.require(
                    not whole,
                    "eval.prompts",
                    f"the held-out prompts do not suit {where}: {message.split(': ', 1)[-1]}",
                )
                if not whole:  # one of its settings (weights not found, a bad value): said under its own key
                    errors.messages.append(message)

    def __init__(self, cfg: DictConfig, backbone, reward, world: World, logger, run_dir: Path, ema=None):
        e = cfg.eval
        self.backbone, self.world, self.logger, self.run_dir, self.ema = backbone, world, logger, Path(run_dir), ema
        self.every, self.steps = int(e.every), int(cfg.trainer.steps)
        self.guidance = None if e.guidance is None else float(e.guidance)
        self.batch_size = int(e.batch_size)
        self.prompts = held_out_prompts(cfg)
        # sample-major order: the first len(prompts) items are one sample of every prompt (the image grid)
        self.items = [(p, j) for j in range(int(e.samples_per_prompt)) for p in self.prompts]
        self.val_items = [(p, j) for j in range(int(e.samples_per_prompt)) for p in validation_prompts(cfg)]
        self.grid_size = min(int(cfg.trainer.num_sample_images), len(self.items))
        # the first eval.log_samples items (every prompt's first sample first) as files and W&B table rows
        self.media_count = min(int(e.log_samples), len(self.items))
        self.fps = int(cfg.model.fps) if backbone.video else None
        self.sigmas = family_sigmas(backbone, int(e.sampling_steps))
        device = backbone.device
        self.rewards = {str(cfg.reward.name): reward}
        for name, reward_cfg in extra_rewards(cfg).items():
            self.rewards[name] = build(reward_cfg, f"eval.rewards.{name}").to(device).eval().requires_grad_(False)
        self.last_done = int(broadcast_object(logger.last_eval_step))  # a resumed run evaluates each point once

    def due(self, step: int) -> bool:
        """Whether evaluation ``step`` (the model after ``step`` training steps) should run now."""
        return self.every > 0 and step > self.last_done and (step % self.every == 0 or step == self.steps)

    def maybe_run(self, step: int, wallclock_s: float) -> dict[str, float] | None:
        """Evaluate the model after ``step`` training steps if due; log the row and the grid; return the row."""
        if not self.due(step):
            return None
        return self.run(step, wallclock_s)

    def run(self, step: int, wallclock_s: float) -> dict[str, float]:
        """Evaluate the model as it is now, as evaluation ``step`` (collective): log the row and the grid, return
        the row. :meth:`maybe_run` calls it when due; ``rewardflow-eval`` (launcher/evaluate_cli.py) for each
        weights source it scores, so both measure with this one implementation."""
        t0 = time.perf_counter()
        weights = self.ema.applied() if self.ema is not None else contextlib.nullcontext()
        with weights:
            scores, grid, files = self._sample_and_score(self.items, self.grid_size, self.media_dir(step))
            val_scores = self._sample_and_score(self.val_items, 0, None)[0] if self.val_items else {}
        row: dict[str, float] = {"step": step}
        for prefix, by_name in (("eval", scores), ("val", val_scores)):
            for name, values in by_name.items():
                row[f"{prefix}/{name}/mean"] = float(values.mean())
                row[f"{prefix}/{name}/std"] = float(values.std()) if values.numel() > 1 else 0.0
        row.update(
            {
                "time/eval_s": time.perf_counter() - t0,
                # keys of their own: W&B and rewardflow-compare merge an evaluation with the training row of its
                # step, whose time/* axes hold the compute after that step (docs/evaluation.md#what-a-run-logs);
                # the validation scores (val/*) of the same row sit at the same compute
                "time/eval_wallclock_s": wallclock_s,
                "time/eval_gpu_hours": self.world.world_size * wallclock_s / 3600.0,
            }
        )
        self.last_done = step
        self.logger.log_eval(row)
        if self.world.is_main:
            self._log_grid(step, grid, scores)
            self._log_samples(step, files, scores)
            log.info(
                "evaluation after %d steps: %s (%.1f s)",
                step,
                ", ".join(f"{k.removesuffix('/mean')} {v:.4f}" for k, v in row.items() if k.endswith("/mean")),
                row["time/eval_s"],
            )
        return row

    # -- internals ------------------------------------------------------------------------------------------------
    def _my_share(self, n: int) -> list[int]:
        """This rank's indices of ``n`` items, padded (with its last index, whose scores are dropped) to the same
        length on every rank, so all ranks run the same number of sharded forwards."""
        rank, world = self.world.rank, self.world.world_size
        per_rank = math.ceil(n / world)
        mine = list(range(rank, n, world))
        return mine + [mine[-1] if mine else 0] * (per_rank - len(mine))

    def _initial_noise(self, items: list[tuple[str, int]]) -> torch.Tensor:
        return torch.cat(
            [self.backbone.initial_noise(1, torch.Generator().manual_seed(noise_seed(p, j))) for p, j in items]
        )

    def media_dir(self, step: int) -> Path:
        """Where evaluation ``step`` writes its samples, one file each (``samples/eval_<k>/``)."""
        return self.run_dir / "samples" / f"eval_{step:05d}"

    @torch.no_grad()
    def _sample_and_score(
        self, all_items: list[tuple[str, int]], grid_size: int, media_dir: Path | None
    ) -> tuple[dict[str, torch.Tensor], list[tuple[int, torch.Tensor]], list[tuple[int, Path]]]:
        """Scores of ``all_items`` by reward name (float64, in item order, gathered from every rank), the images
        of the first ``grid_size`` items (the grid), and the files of the first ``self.media_count`` items, which
        each rank writes into ``media_dir`` for its own share (None: none), so no video crosses ranks."""
        bb = self.backbone
        share = self._my_share(len(all_items))
        real = len(range(self.world.rank, len(all_items), self.world.world_size))
        media_count = self.media_count if media_dir is not None else 0
        mine: dict[str, list[float]] = {n: [] for n in self.rewards}
        grid: list[tuple[int, torch.Tensor]] = []
        files: list[tuple[int, Path]] = []
        was_training = bb.transformer.training
        cuda = [bb.device] if bb.device.type == "cuda" else []
        bb.transformer.eval()
        try:
            with torch.random.fork_rng(devices=cuda), bb.guidance_override(self.guidance):
                for start in range(0, len(share), self.batch_size):
                    idx = share[start : start + self.batch_size]
                    items = [all_items[i] for i in idx]
                    prompts = [p for p, _ in items]
                    latents = family_ode_sample(bb, bb.encode_prompts(prompts), self._initial_noise(items), self.sigmas)
                    images = bb.decode(latents).float()
                    for name, reward in self.rewards.items():
                        mine[name] += reward.evaluate(images, prompts).double().cpu().tolist()
                    for k, i in enumerate(idx):
                        if start + k >= real:  # the padding's repeat
                            continue
                        if i < grid_size:
                            grid.append((i, _grid_image(images[k])))
                        if i < media_count:
                            assert media_dir is not None
                            stem = media_dir / file_stem(i, prompts[k])
                            files.append((i, save_sample(images[k], stem, self.fps)))
        finally:
            bb.transformer.train(was_training)
        keep = {n: list(zip(share[:real], v[:real])) for n, v in mine.items()}
        gathered = all_gather_objects((keep, grid, files))  # also: every rank's files are written by now
        scores = {}
        for name in self.rewards:
            by_item = dict(pair for part, _, _ in gathered for pair in part[name])
            scores[name] = torch.tensor([by_item[i] for i in range(len(all_items))], dtype=torch.float64)
            if getattr(self.rewards[name], "per_prompt", False):  # per-sample features -> one per prompt (diversity)
                scores[name] = self.rewards[name].prompt_scores(scores[name], [p for p, _ in all_items])
        grid = sorted((pair for _, part, _ in gathered for pair in part), key=lambda t: t[0])
        files = sorted((pair for _, _, part in gathered for pair in part), key=lambda t: t[0])
        return scores, grid, files

    def _log_grid(self, step: int, grid: list[tuple[int, torch.Tensor]], scores: dict[str, torch.Tensor]) -> None:
        if not grid:
            return
        images = torch.stack([img for _, img in grid]).float() / 255.0
        path = save_image_grid(images, self.run_dir / "samples" / f"eval_{step:05d}.png")
        first = next(iter(scores))
        caption = " | ".join(f"{self.items[i][0]} ({float(scores[first][i]):.3f})" for i, _ in grid)
        self.logger.log_image("eval/samples", path, step, caption)

    def _log_samples(self, step: int, files: list[tuple[int, Path]], scores: dict[str, torch.Tensor]) -> None:
        """The evaluated samples written as files: ``samples.jsonl`` beside them, and a W&B table with a row per
        sample: step, prompt, sample index, the image (or video) and every reward's score (a per-prompt reward's:
        its prompt's)."""
        if not files:
            return
        # a per-prompt score's position: its prompt's first appearance (rewards.base.Reward.prompt_scores)
        position = {p: k for k, p in enumerate(dict.fromkeys(p for p, _ in self.items))}
        per_prompt = {name for name, reward in self.rewards.items() if getattr(reward, "per_prompt", False)}
        rows: list[list[Any]] = []
        index: list[dict[str, Any]] = []
        for i, path in files:
            prompt, j = self.items[i]
            by_reward = {
                name: float(values[position[prompt]] if name in per_prompt else values[i])
                for name, values in scores.items()
            }
            rows.append([step, prompt, j, MediaFile(path, media_caption(prompt, by_reward)), *by_reward.values()])
            index.append({"file": path.name, "prompt": prompt, "sample": j, **by_reward})
        write_index(self.media_dir(step), index)
        columns = ["step", "prompt", "sample", "video" if files[0][1].suffix == VIDEO_SUFFIX else "image", *scores]
        self.logger.log_table(EVAL_TABLE_KEY, columns, rows, step)


def _grid_image(image: torch.Tensor) -> torch.Tensor:
    """One image (its middle frame for a video) as uint8 on the CPU, small enough to gather from every rank."""
    if image.dim() == 4:
        image = image[image.shape[0] // 2]
    return (image.clamp(0, 1) * 255).round().to(torch.uint8).cpu()
