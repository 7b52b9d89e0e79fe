"""The run's closing line names only the outputs the run wrote (launcher/tracking/closing_line.py, issue 29)."""

from __future__ import annotations

from types import SimpleNamespace

from launcher.tracking.closing_line import closing_line


def test_samples_are_named_only_when_grids_were_drawn(tmp_path):
    (tmp_path / "metrics.jsonl").write_text("{}\n")
    (tmp_path / "reward_curve.png").write_bytes(b"")
    assert closing_line(tmp_path) == f"run dir {tmp_path}: metrics.jsonl, reward_curve.png"
    (tmp_path / "samples").mkdir()
    wandb = SimpleNamespace(mode="offline", location="wandb/offline-run-x")
    assert closing_line(tmp_path, wandb) == (
        f"run dir {tmp_path}: metrics.jsonl, reward_curve.png, samples/; W&B (offline): wandb/offline-run-x"
    )
