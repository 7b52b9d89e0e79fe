"""Append-only files that heal (issue 26 item 1, docs/resume.md#torn-files): a metrics row torn by a full disk and a
0-byte W&B offline file no longer block every restart; the torn row is cut off with one warning naming the file and
the byte offset, and the resumed run logs every step once."""

from __future__ import annotations

import json
import logging
import shutil

import pytest

from conftest import compose
from launcher.checkpoint.resume import StartPoint, copy_history
from launcher.tracking.wandb_offline import find_offline_runs
from launcher.train.trainer import RunInfo, Trainer
from rewardflow.errors import ConfigError
from rewardflow.jsonl import read_rows

ROWS = [{"step": 0, "reward/mean": 0.5}, {"step": 1, "reward/mean": 0.6}]


def _write(path, text):
    path.write_text(text)
    return path


def test_a_torn_last_row_is_dropped_with_a_warning_and_cut_off_the_file(tmp_path, caplog):
    whole = "".join(json.dumps(r) + "\n" for r in ROWS)
    path = _write(tmp_path / "metrics.jsonl", whole + '{"step": 2, "rew')
    with caplog.at_level(logging.WARNING):
        assert read_rows(path) == ROWS
    assert f"from byte {len(whole)}" in caplog.text and str(path) in caplog.text
    assert path.read_text().endswith('"rew')  # without heal the file is only read
    assert read_rows(path, heal=True) == ROWS
    assert path.read_text() == whole  # the next row appended starts on a line of its own


def test_a_whole_last_row_without_its_newline_is_kept_and_terminated(tmp_path):
    path = _write(tmp_path / "metrics.jsonl", json.dumps(ROWS[0]) + "\n" + json.dumps(ROWS[1]))
    assert read_rows(path, heal=True) == ROWS
    assert path.read_text().endswith("}\n")


def test_a_bad_row_before_others_is_an_error_naming_the_line(tmp_path):
    path = _write(tmp_path / "metrics.jsonl", json.dumps(ROWS[0]) + "\nnot json\n" + json.dumps(ROWS[1]) + "\n")
    with pytest.raises(ConfigError, match="line 2 is not a metrics row"):
        read_rows(path, heal=True)


def test_resume_from_copies_the_rows_before_a_torn_one(tmp_path):
    source = tmp_path / "source"
    (source / "checkpoints" / "step_00000001").mkdir(parents=True)
    _write(source / "metrics.jsonl", "".join(json.dumps(r) + "\n" for r in ROWS) + '{"st')
    start = StartPoint(source / "checkpoints" / "step_00000001", {"step": 1}, own_run=False)
    assert copy_history(start, tmp_path / "new") == 2
    assert read_rows(tmp_path / "new" / "metrics.jsonl") == ROWS
    assert source.joinpath("metrics.jsonl").read_text().endswith('{"st')  # the other run is only read


RUN = ["experiment=smoke", "trainer.ckpt_every=2", "trainer.export=false"]


def test_a_run_with_a_torn_row_and_a_0_byte_wandb_file_resumes_logging_every_step_once(tmp_path, caplog):
    """A full disk during step 2: its row torn, its checkpoint never written, the W&B file empty."""
    Trainer(compose([*RUN, "trainer.steps=3"]), RunInfo(run_dir=tmp_path)).fit()
    shutil.rmtree(tmp_path / "checkpoints" / "step_00000002")
    metrics = tmp_path / "metrics.jsonl"
    text = metrics.read_text()
    metrics.write_text(text[: text.rindex('{"step": 2') + 25])
    (folder,) = find_offline_runs(tmp_path)
    (wandb_file,) = folder.glob("run-*.wandb")
    wandb_file.write_bytes(b"")
    with caplog.at_level(logging.WARNING):
        resumed = Trainer(compose([*RUN, "trainer.steps=4"]), RunInfo(run_dir=tmp_path))
        assert resumed.start_step == 2
        resumed.fit()
    assert "is cut short" in caplog.text and "counted as holding no steps" in caplog.text
    steps = [int(r["step"]) for r in read_rows(metrics) if not any(k.startswith("eval/") for k in r)]
    assert steps == [0, 1, 2, 3]
