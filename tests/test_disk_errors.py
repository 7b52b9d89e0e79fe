"""Out-of-space and read-only errors (issue 26 item 8, docs/resume.md#torn-files): one line with the path and the
errno instead of a chain of tracebacks, and no 0-byte artefacts (the reward curve and image grids are written whole
or not at all)."""

from __future__ import annotations

import errno

import pytest
import torch

from conftest import compose
from launcher import cli
from launcher.tracking import plots
from launcher.train.trainer import RunInfo, Trainer

ENOSPC = OSError(errno.ENOSPC, "No space left on device", "/full/run/metrics.jsonl")


def test_the_disk_error_is_found_in_the_chain_of_failures_it_set_off():
    try:
        try:
            raise ENOSPC
        finally:
            raise RuntimeError("the clean-up failed too")  # chained as __context__
    except RuntimeError as e:
        assert cli.disk_error_in(e) is ENOSPC
    assert cli.disk_error_in(ValueError("x")) is None
    assert cli.disk_error_in(OSError(errno.ENOENT, "missing")) is None


def test_a_plot_that_cannot_be_written_leaves_no_file(tmp_path, monkeypatch):
    import matplotlib.figure

    def full_disk(self, fname, **kwargs):
        with open(fname, "wb") as fh:
            fh.write(b"\x89PNG half")
        raise OSError(errno.ENOSPC, "No space left on device", str(fname))

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", full_disk)
    history = [{"step": 0, "reward/mean": 0.5, "time/wallclock_s": 1.0}]
    with pytest.raises(OSError):
        plots.plot_reward_curve(history, tmp_path / "reward_curve.png")
    assert list(tmp_path.iterdir()) == []
    plots.save_image_grid(torch.rand(2, 3, 8, 8), tmp_path / "grid.png")
    assert [p.name for p in tmp_path.iterdir()] == ["grid.png"]  # the rename leaves no temporary file


def test_a_full_disk_mid_run_ends_with_one_line(tmp_path, monkeypatch, capsys):
    cfg = compose(["experiment=smoke", "logger=none", "trainer.export=false"])

    def full_disk(self, step):
        raise ENOSPC

    monkeypatch.setattr(Trainer, "train_step", full_disk)
    with pytest.raises(SystemExit) as ended:
        cli.run(cfg, RunInfo(run_dir=tmp_path))
    assert ended.value.code == 1
    err = capsys.readouterr().err
    assert "cannot write /full/run/metrics.jsonl: No space left on device (errno 28)" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "reward_curve.png").exists() or (tmp_path / "reward_curve.png").stat().st_size > 0
