"""Media a person looks at (issue 28 item 6; docs/wandb.md#samples-and-videos): every training sample shown and every
evaluated sample up to ``eval.log_samples`` is a file of its own beside the grid (a PNG, or a GIF for a video at
``model.fps``), listed with its prompt and scores in ``samples.jsonl``; W&B gets one captioned image or video per
training sample and a table of the evaluated samples, read back here from the real offline run files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import compose
from launcher.tracking.media import INDEX, file_stem, save_sample
from launcher.tracking.wandb_offline import find_offline_runs, read_offline_run
from launcher.train.trainer import RunInfo, Trainer
from rewards.tiny_twins import tiny_reward_overrides

# 2 steps of 2 prompts x 2 samples, all 4 shown at each step; evaluated at steps 0 and 2 on the demo's 8 held-out
# prompts, 2 samples each (16), of which the first 10 are written and tabled; a second reward scored
SMOKE = [
    "experiment=smoke",
    "trainer.export=false",
    "trainer.steps=2",
    "eval.every=2",
    "+reward@eval.rewards.jpeg=jpeg",
]
WANDB = ["logger=wandb", "logger.mode=offline"]
RUN = [*SMOKE, *WANDB, "trainer.sample_every=1", "eval.log_samples=10"]


def with_diversity(tiny_rewards) -> list[str]:
    """Diversity (a per-prompt score) on the tiny CLIP twin, in place of the demo's default on pixels."""
    key = "eval.rewards.diversity"
    return [f"reward@{key}=diversity", *tiny_reward_overrides(tiny_rewards, "diversity", key)]


def index_rows(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / INDEX).read_text().splitlines()]


def logged(run_dir: Path, key: str) -> dict[int, dict]:
    """The media W&B holds under ``key`` at each step, from the run's offline ``.wandb`` file (a history record
    holds a medium's fields under nested keys: ``<key>/_type``, ``<key>/path``, ...)."""
    (folder,) = find_offline_runs(run_dir)
    out = {}
    for row in read_offline_run(folder).history:
        fields = {k.removeprefix(f"{key}/"): v for k, v in row.items() if k.startswith(f"{key}/")}
        fields = {k: v for k, v in fields.items() if "/" not in k}  # not a longer key's (samples/images/...)
        if fields:
            out[int(row["step"])] = fields
    return out


def logged_table(run_dir: Path, fields: dict) -> tuple[dict, dict[str, str]]:
    """A logged wandb.Table's JSON and its files (media path -> the file W&B staged), from its history fields."""
    (folder,) = find_offline_runs(run_dir)
    table, artifact = read_offline_run(folder).table(fields["artifact_path"])
    assert fields["_type"] == "table-file" and artifact.type == "run_table"
    return table, artifact.files


def wandb_file(run_dir: Path, relative: str) -> Path:
    """A media file W&B copied into the offline run (the history names it relative to the run's files/)."""
    (folder,) = find_offline_runs(run_dir)
    path = folder / "files" / relative
    assert path.is_file(), path
    return path


def test_training_and_evaluation_samples_are_files_and_wandb_images(tmp_path, tiny_rewards):
    trainer = Trainer(compose([*RUN, *with_diversity(tiny_rewards)]), RunInfo(run_dir=tmp_path))
    trainer.fit()
    samples = tmp_path / "samples"
    assert sorted(p.name for p in samples.iterdir()) == [
        "eval_00000",
        "eval_00000.png",
        "eval_00002",
        "eval_00002.png",
        "step_00000",
        "step_00000.png",
        "step_00001",
        "step_00001.png",
    ]

    # training: the 4 samples of each step, in the grid's order (one per prompt first), each captioned in W&B
    for step in (0, 1):
        rows = index_rows(samples / f"step_{step:05d}")
        assert len(rows) == 4 and [r["sample"] for r in rows] == [0, 0, 1, 1]
        assert [r["file"] for r in rows] == [f"{file_stem(k, r['prompt'])}.png" for k, r in enumerate(rows)]
        for r in rows:
            with Image.open(samples / f"step_{step:05d}" / r["file"]) as image:
                assert image.format == "PNG" and image.size == (128, 128)  # the 32-pixel twin enlarged 4 times
            assert 0 <= r["color"] <= 1
        media = logged(tmp_path, "samples/images")[step]
        assert media["_type"] == "images/separated" and media["count"] == 4
        assert media["captions"] == [f"{r['prompt']} | color {r['color']:.4f}" for r in rows]
        for name, r in zip(media["filenames"], rows):  # W&B holds the files the run dir holds
            assert wandb_file(tmp_path, name).read_bytes() == (samples / f"step_{step:05d}" / r["file"]).read_bytes()
    train_rows = [json.loads(l) for l in (tmp_path / "metrics.jsonl").read_text().splitlines() if '"reward/mean"' in l]
    assert sum(r["color"] for r in index_rows(samples / "step_00001")) / 4 == pytest.approx(
        train_rows[1]["reward/mean"]
    )
    assert set(logged(tmp_path, "samples")) == {0, 1}  # the grid too, as before

    # evaluation: the first 10 of 16 (prompt, sample) pairs: the 8 prompts' first samples, then 2 second samples
    held_out = list(compose(RUN).eval.prompts)
    eval_rows = {
        json.loads(l)["step"]: json.loads(l)
        for l in (tmp_path / "metrics.jsonl").read_text().splitlines()
        if "eval/" in l
    }
    tables = logged(tmp_path, "eval/samples_table")
    assert set(tables) == {0, 2}
    for step in (0, 2):
        rows = index_rows(samples / f"eval_{step:05d}")
        assert [(r["prompt"], r["sample"]) for r in rows] == [(p, 0) for p in held_out] + [(p, 1) for p in held_out[:2]]
        assert len(list((samples / f"eval_{step:05d}").glob("*.png"))) == 10
        # every prompt's diversity is its prompt's score; the color scores are the evaluation's (its mean, with all)
        diversity = {r["prompt"]: r["diversity"] for r in rows}
        assert sum(diversity.values()) / 8 == pytest.approx(eval_rows[step]["eval/diversity/mean"], rel=1e-12)
        assert all(r["diversity"] == diversity[r["prompt"]] for r in rows)

        table, files = logged_table(tmp_path, tables[step])
        assert table["columns"] == ["step", "prompt", "sample", "image", "color", "brightness", "diversity", "jpeg"]
        assert len(table["data"]) == 10
        for (row_step, prompt, sample, image, color, bright, div, jpeg), r in zip(table["data"], rows):
            assert (row_step, prompt, sample, color, bright, div, jpeg) == (
                step,
                r["prompt"],
                r["sample"],
                r["color"],
                r["brightness"],
                r["diversity"],
                r["jpeg"],
            )
            assert image["_type"] == "image-file" and image["caption"].startswith(f"{prompt} | color ")
            with Image.open(files[image["path"]]) as shown:
                with Image.open(samples / f"eval_{step:05d}" / r["file"]) as written:
                    assert shown.tobytes() == written.tobytes()


def test_all_evaluated_samples_score_as_the_evaluation_and_none_are_written_with_zero(tmp_path):
    """With eval.log_samples above the count every sample is a file, and their scores give the logged mean and std;
    eval.log_samples=0 writes and logs no sample (the grid stays)."""
    overrides = ["experiment=smoke", "logger=none", "trainer.export=false", "trainer.steps=1", "eval.every=1"]
    Trainer(compose([*overrides, "eval.log_samples=1000"]), RunInfo(run_dir=tmp_path / "all")).fit()
    row = json.loads((tmp_path / "all" / "metrics.jsonl").read_text().splitlines()[0])
    scores = torch.tensor(
        [r["color"] for r in index_rows(tmp_path / "all" / "samples" / "eval_00000")], dtype=torch.float64
    )
    assert scores.numel() == 16
    assert float(scores.mean()) == pytest.approx(row["eval/color/mean"], rel=1e-12)
    assert float(scores.std()) == pytest.approx(row["eval/color/std"], rel=1e-9)

    Trainer(compose([*overrides, "eval.log_samples=0"]), RunInfo(run_dir=tmp_path / "none")).fit()
    assert sorted(p.name for p in (tmp_path / "none" / "samples").iterdir()) == ["eval_00000.png", "eval_00001.png"]


def test_video_samples_are_gifs_and_wandb_videos(tmp_path):
    """model=tiny_wan2.1 (5-frame videos): each training and evaluated sample is a GIF of 5 frames at model.fps, a
    wandb.Video in W&B (the training samples' list and the evaluation table's video column)."""
    run = [
        "experiment=smoke",
        "trainer.export=false",
        "+reward@eval.rewards.jpeg=jpeg",
        *WANDB,
        "model=tiny_wan2.1",
        "model.fps=8",
        "trainer.steps=1",
        "trainer.sample_every=1",
        "eval.every=1",
        "eval.samples_per_prompt=1",
        "~reward@eval.rewards.diversity",  # one sample a prompt: no diversity to score
        "eval.log_samples=3",
    ]
    Trainer(compose(run), RunInfo(run_dir=tmp_path)).fit()
    folders = {"step_00000": 4, "eval_00000": 3, "eval_00001": 3}
    for name, count in folders.items():
        rows = index_rows(tmp_path / "samples" / name)
        assert len(rows) == count and len(list((tmp_path / "samples" / name).glob("*.gif"))) == count
        for r in rows:
            with Image.open(tmp_path / "samples" / name / r["file"]) as gif:
                assert gif.format == "GIF" and gif.n_frames == 5 and gif.size == (128, 128)
                assert abs(gif.info["duration"] - 1000 / 8) <= 10  # GIF delays are in hundredths of a second
    videos = logged(tmp_path, "samples/videos")[0]
    assert videos["_type"] == "videos" and videos["count"] == 4
    for video in videos["videos"]:
        assert video["_type"] == "video-file" and wandb_file(tmp_path, video["path"]).suffix == ".gif"
    tables = logged(tmp_path, "eval/samples_table")
    assert set(tables) == {0, 1}
    for step, table_ref in tables.items():
        table, files = logged_table(tmp_path, table_ref)
        assert (
            table["columns"] == ["step", "prompt", "sample", "video", "color", "brightness", "jpeg"]
            and len(table["data"]) == 3
        )
        assert [row[0] for row in table["data"]] == [step] * 3
        for row in table["data"]:
            assert row[3]["_type"] == "video-file"
            with Image.open(files[row[3]["path"]]) as gif:
                assert gif.n_frames == 5


def test_sample_files_are_named_by_position_and_prompt(tmp_path):
    assert file_stem(3, "A red car, at night!") == "0003_a-red-car-at-night"
    assert file_stem(12, "日本の猫") == "0012_sample"  # no ASCII word: named by position only
    assert len(file_stem(0, "word " * 40)) <= 45
    frame = torch.rand(1, 3, 200, 160)  # a one-frame video is an image, written at its own size
    path = save_sample(frame, tmp_path / "one", fps=None)
    with Image.open(path) as image:
        assert path.name == "one.png" and image.size == (160, 200)
        pixels = torch.from_numpy(np.array(image)).permute(2, 0, 1)
        assert torch.equal(pixels, (frame[0] * 255).round().to(torch.uint8))
    with pytest.raises(ValueError, match="model.fps"):
        save_sample(torch.rand(3, 3, 8, 8), tmp_path / "video", fps=None)
    assert not list(tmp_path.glob(".*.tmp"))
