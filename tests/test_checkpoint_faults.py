"""Checkpoint faults (issue 16): a damaged newest checkpoint is skipped for the previous complete one, a run whose
every checkpoint is damaged refuses to start over, and no file of a run folder is unpickled beyond plain data, so
a crafted checkpoint cannot run code."""

from __future__ import annotations

import json
import logging
import os
import random
import warnings

import numpy as np
import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

from conftest import compose
from launcher.checkpoint import rng_state
from launcher.checkpoint.manager import CheckpointManager, CheckpointMisfit, NoUsableCheckpoint
from launcher.train.trainer import RunInfo, Trainer
from rewardflow.distributed import World

RUN = [
    "experiment=smoke",
    "logger=none",
    "trainer.steps=6",
    "trainer.ckpt_every=2",
    "trainer.keep_last_ckpts=3",
    "trainer.threads=1",
]


def params(trainer):
    return {k: v.detach().clone() for k, v in trainer.backbone.transformer.named_parameters()}


def untimed_rows(run_dir):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


def small_checkpoints(root, steps=2):
    """A Linear model and AdamW with a complete checkpoint after each of ``steps`` optimizer steps; also returns the
    model's weights at each checkpoint."""
    model = torch.nn.Linear(4, 4)
    opt = torch.optim.AdamW(model.parameters())
    mgr = CheckpointManager(root, World(), keep_last=5)
    weights = {}
    for step in range(1, steps + 1):
        model(torch.randn(2, 4)).sum().backward()
        opt.step()
        opt.zero_grad()
        mgr.save(step, model, opt, {"wallclock_s": float(step)})
        weights[step] = {k: v.clone() for k, v in model.state_dict().items()}
    return mgr, model, opt, weights


def _truncate_shard(ckpt):
    shard = next(ckpt.glob("*.distcp"))
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])


def _zero_shard(ckpt):  # same size: only loading it can tell
    shard = next(ckpt.glob("*.distcp"))
    data = bytearray(shard.read_bytes())
    data[len(data) // 4 : 3 * len(data) // 4] = bytes(len(data) // 2)
    shard.write_bytes(bytes(data))


def _drop_rank_file(ckpt):
    (ckpt / "rank_00000.pt").unlink()


def _truncate_meta(ckpt):
    (ckpt / "meta.json").write_text('{"step": 5, "wallclock')


DAMAGE = {
    "truncated shard": _truncate_shard,
    "zeroed shard": _zero_shard,
    "missing rank file": _drop_rank_file,
    "truncated meta.json": _truncate_meta,
}


def test_a_truncated_newest_checkpoint_is_skipped_for_the_previous_one(tmp_path, caplog):
    """The acceptance fault test, end to end: a run resumes from step 3 when step 5's shard is truncated, and the
    replayed steps reproduce the lost ones bitwise (CPU)."""
    trainer = Trainer(compose(RUN), RunInfo(run_dir=tmp_path))
    trainer.fit()
    final, rows = params(trainer), untimed_rows(tmp_path)
    assert [p.name for p in trainer.checkpoints.complete()] == ["step_00000001", "step_00000003", "step_00000005"]
    _truncate_shard(tmp_path / "checkpoints" / "step_00000005")
    with caplog.at_level(logging.WARNING):
        resumed = Trainer(compose([*RUN, "trainer.steps=8"]), RunInfo(run_dir=tmp_path))
    assert resumed.start_step == 4
    warned = [r.getMessage() for r in caplog.records if "is damaged and is skipped" in r.getMessage()]
    assert len(warned) == 1 and "step_00000005" in warned[0] and "truncated" in warned[0]
    aside = [p.name for p in (tmp_path / "checkpoints").iterdir() if ".damaged-" in p.name]
    assert len(aside) == 1 and aside[0].startswith("step_00000005.damaged-")  # out of the set pruning counts
    resumed.train_step(4)
    resumed.train_step(5)
    assert all(torch.equal(v, final[k]) for k, v in params(resumed).items())
    assert untimed_rows(tmp_path) == rows  # replayed steps are not logged twice


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_each_kind_of_damage_falls_back_to_the_previous_checkpoint(damage, tmp_path, caplog):
    mgr, model, opt, weights = small_checkpoints(tmp_path, steps=3)
    DAMAGE[damage](tmp_path / "step_00000003")
    with caplog.at_level(logging.WARNING):
        path, meta = mgr.load_newest_usable(model, opt)
    assert path.name == "step_00000002" and meta["step"] == 2
    assert all(torch.equal(v, weights[2][k]) for k, v in model.state_dict().items())
    assert any("step_00000003" in r.getMessage() and "damaged" in r.getMessage() for r in caplog.records)
    assert [p.name for p in mgr.complete()] == ["step_00000001", "step_00000002"]


def test_every_checkpoint_damaged_refuses_to_start_over(tmp_path):
    mgr, model, opt, _ = small_checkpoints(tmp_path, steps=2)
    for ckpt in mgr.complete():
        _truncate_shard(ckpt)
    with pytest.raises(NoUsableCheckpoint) as err:
        mgr.load_newest_usable(model, opt)
    msg = str(err.value)
    assert "step_00000001" in msg and "step_00000002" in msg and "trainer.resume=false" in msg


# ------------------------------------------------------------------------------ nothing is unpickled beyond data
MARKER_NAME = "pwned"


class Payload:
    """Unpickling this writes a marker file: what a crafted run folder would do with plain pickle."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').write('code ran')",)


def _craft_rank_file(ckpt, marker):
    torch.save({"torch": Payload(marker)}, ckpt / "rank_00000.pt")


def _craft_dcp_metadata(ckpt, marker):
    import pickle

    (ckpt / ".metadata").write_bytes(pickle.dumps(Payload(marker)))


def _craft_optimizer_entry(ckpt, marker):
    """A checkpoint whose optimizer param group holds the payload (DCP stores non-tensors as pickled bytes)."""
    model = torch.nn.Linear(4, 4)
    opt = torch.optim.AdamW(model.parameters())
    model_sd, optim_sd = get_state_dict(model, opt, options=StateDictOptions(ignore_frozen_params=True))
    optim_sd["param_groups"][0]["lr"] = Payload(marker)
    for f in ckpt.glob("*.distcp"):
        f.unlink()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(ckpt))


CRAFTED = {
    "rank file": _craft_rank_file,
    "DCP .metadata": _craft_dcp_metadata,
    "optimizer entry in a shard": _craft_optimizer_entry,
}


@pytest.mark.parametrize("where", list(CRAFTED))
def test_a_crafted_pickle_in_a_run_folder_does_not_execute(where, tmp_path, caplog):
    mgr, model, opt, _ = small_checkpoints(tmp_path / "checkpoints")
    marker = tmp_path / MARKER_NAME
    CRAFTED[where](tmp_path / "checkpoints" / "step_00000002", marker)
    with caplog.at_level(logging.WARNING):
        path, meta = mgr.load_newest_usable(model, opt)
    assert not marker.exists(), "unpickling the crafted file ran code"
    assert path.name == "step_00000001" and meta["step"] == 1
    assert any("step_00000002" in r.getMessage() and "damaged" in r.getMessage() for r in caplog.records)


def test_the_unsafe_loader_would_have_run_the_payload(tmp_path):
    """The payload is real: plain torch.load runs it (so the test above proves the safe loaders stop it)."""
    marker = tmp_path / MARKER_NAME
    torch.save({"torch": Payload(marker)}, tmp_path / "evil.pt")
    torch.load(tmp_path / "evil.pt", weights_only=False)
    assert marker.read_text() == "code ran"


def test_rng_files_round_trip_as_plain_data_and_legacy_files_still_load(tmp_path):
    torch.manual_seed(1), np.random.seed(2), random.seed(3)
    rng_state.save(tmp_path / "new.pt")
    torch.save(
        {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()},
        tmp_path / "legacy.pt",
    )  # the format before weights_only loading
    expected = (torch.rand(3), np.random.rand(3), random.random())
    for name in ("new.pt", "legacy.pt"):
        torch.manual_seed(9), np.random.seed(9), random.seed(9)
        rng_state.restore(rng_state.load(tmp_path / name))
        got = (torch.rand(3), np.random.rand(3), random.random())
        assert torch.equal(got[0], expected[0]) and np.array_equal(got[1], expected[1]) and got[2] == expected[2]


def test_single_process_checkpoints_do_not_warn(tmp_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mgr, model, opt, _ = small_checkpoints(tmp_path)
        mgr.load(mgr.latest(), model, opt)
    assert not [w for w in caught if "assuming the intent" in str(w.message)]


def test_a_checkpoint_of_another_world_size_is_a_config_error(tmp_path):
    from rewardflow.errors import ConfigError

    mgr, model, opt, _ = small_checkpoints(tmp_path)
    meta = json.loads((mgr.latest() / "meta.json").read_text())
    (mgr.latest() / "meta.json").write_text(json.dumps({**meta, "world_size": 2}))
    with pytest.raises(ConfigError, match="cluster.tasks_per_node"):
        mgr.load(mgr.latest(), model, opt)
    assert os.path.isdir(mgr.latest())  # not set aside: the checkpoint is fine


# ------------------------------------------------------------------------------ checksums (issue 26 item 3)
def _flip_bytes(ckpt, count=64):
    """Same size, other content, in the middle of the newest shard: only the checksum can tell for certain."""
    shard = sorted(ckpt.glob("*.distcp"))[0]
    data = bytearray(shard.read_bytes())
    middle = len(data) // 2
    for i in range(middle, middle + count):
        data[i] ^= 0xFF
    shard.write_bytes(bytes(data))
    return shard.name


def test_every_file_is_recorded_with_its_size_and_sha256(tmp_path):
    mgr, *_ = small_checkpoints(tmp_path, steps=1)
    (ckpt,) = mgr.complete()
    files = json.loads((ckpt / "meta.json").read_text())["files"]
    on_disk = {p.name for p in ckpt.iterdir()} - {"meta.json", "COMPLETE"}
    assert set(files) == on_disk and ".metadata" in files and "rank_00000.pt" in files
    assert all(size == (ckpt / name).stat().st_size and len(sha) == 64 for name, (size, sha) in files.items())


def test_flipped_bytes_in_the_newest_shard_fall_back_with_a_warning_naming_the_file(tmp_path, caplog):
    mgr, model, opt, weights = small_checkpoints(tmp_path, steps=3)
    name = _flip_bytes(tmp_path / "step_00000003")
    with caplog.at_level(logging.WARNING):
        path, _ = mgr.load_newest_usable(model, opt)
    assert path.name == "step_00000002"
    assert all(torch.equal(v, weights[2][k]) for k, v in model.state_dict().items())
    (warning,) = [r.getMessage() for r in caplog.records if "is damaged and is skipped" in r.getMessage()]
    assert "step_00000003" in warning and name in warning and "sha256" in warning


def test_a_same_size_shard_from_another_run_is_damage(tmp_path):
    mgr, model, opt, _ = small_checkpoints(tmp_path / "a", steps=2)
    small_checkpoints(tmp_path / "b", steps=2)
    for shard in (tmp_path / "b" / "step_00000002").glob("*.distcp"):
        target = tmp_path / "a" / "step_00000002" / shard.name
        assert target.stat().st_size == shard.stat().st_size
        target.write_bytes(shard.read_bytes())
    path, _ = mgr.load_newest_usable(model, opt)
    assert path.name == "step_00000001"


def test_a_trainer_run_records_and_verifies_checksums_end_to_end(tmp_path, caplog):
    Trainer(compose([*RUN, "trainer.steps=4"]), RunInfo(run_dir=tmp_path)).fit()
    name = _flip_bytes(tmp_path / "checkpoints" / "step_00000003")
    with caplog.at_level(logging.WARNING):
        resumed = Trainer(compose([*RUN, "trainer.steps=6"]), RunInfo(run_dir=tmp_path))
    assert resumed.start_step == 2 and any(name in r.getMessage() for r in caplog.records)


# ------------------------------------------------------------------------------ resume never destroys (item 2)
def test_a_checkpoint_that_does_not_fit_the_model_is_a_config_error_and_stays(tmp_path):
    mgr, *_ = small_checkpoints(tmp_path, steps=2)
    other = torch.nn.Linear(4, 5)  # another model: every checkpoint misfits, none is damaged
    opt = torch.optim.AdamW(other.parameters())
    other(torch.randn(2, 4)).sum().backward()
    opt.step()
    with pytest.raises(CheckpointMisfit, match="Size mismatch between saved") as err:
        mgr.load_newest_usable(other, opt)
    assert "step_00000002" in str(err.value) and "Fix" in str(err.value)
    assert [p.name for p in tmp_path.iterdir()] and not list(tmp_path.glob("*.damaged-*"))
    assert [p.name for p in mgr.complete()] == ["step_00000001", "step_00000002"]


def test_starting_over_moves_the_old_history_aside_and_uses_a_new_wandb_run(tmp_path):
    run = [*RUN, "logger=wandb", "trainer.steps=2"]
    Trainer(compose(run), RunInfo(run_dir=tmp_path)).fit()
    first_rows = (tmp_path / "metrics.jsonl").read_text()
    first_id = (tmp_path / "wandb_run_id").read_text()
    Trainer(compose([*run, "trainer.resume=false"]), RunInfo(run_dir=tmp_path)).fit()
    (aside,) = tmp_path.glob("metrics.before-*.jsonl")
    assert aside.read_text() == first_rows
    assert (tmp_path / "wandb_run_id").read_text() != first_id
