"""Read an offline W&B run (``run-<id>.wandb``) back: history rows, config, summary, metric definitions and the
artifacts it logged (a ``wandb.Table`` is one: its JSON and its images are files W&B stages outside the run folder).

wandb 0.31 ships no reader for these files; the format is a LevelDB-log-framed stream of
``wandb.proto.wandb_internal_pb2.Record`` (docs/development.md#wb-offline-files). Used by tests and by the compare
tool; pinned to ``wandb>=0.31,<0.32`` in pyproject because it relies on that internal format.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

_BLOCK = 32768
_HEADER = 7


@dataclass
class OfflineArtifact:
    """An artifact record: ``files`` maps each entry's path in the artifact to the local file W&B staged for it (in
    its data dir, ``WANDB_DATA_DIR``; ``wandb sync`` uploads it from there)."""

    name: str
    type: str
    client_id: str
    files: dict[str, str] = field(default_factory=dict)


@dataclass
class OfflineRun:
    path: Path
    run_id: str = ""
    project: str = ""
    group: str = ""
    name: str = ""
    tags: list[str] = field(default_factory=list)
    config: dict = field(default_factory=dict)
    history: list[dict] = field(default_factory=list)
    summary: dict = field(default_factory=dict)
    metrics: list[dict] = field(default_factory=list)  # define_metric records
    exit_code: int | None = None  # the exit record's (None: the run was never finished)
    artifacts: list[OfflineArtifact] = field(default_factory=list)

    def series(self, key: str) -> list:
        return [row[key] for row in self.history if key in row]

    def table(self, artifact_path: str) -> tuple[dict, OfflineArtifact]:
        """The JSON of a logged ``wandb.Table`` and its artifact, from the ``<key>/artifact_path`` its history row
        holds (``wandb-client-artifact://<client id>/<file>``); a media cell's ``path`` is a key of its ``files``."""
        client_id, _, name = artifact_path.removeprefix("wandb-client-artifact://").partition("/")
        (artifact,) = [a for a in self.artifacts if a.client_id == client_id]
        return json.loads(Path(artifact.files[name]).read_text()), artifact


def iter_records(path: str | Path) -> Iterator[bytes]:
    data = Path(path).read_bytes()
    if data[:4] != b":W&B":
        raise ValueError(f"{path}: not a W&B run file")
    off, buf = _HEADER, b""
    while off + _HEADER <= len(data):  # an incomplete trailing chunk (killed writer) is ignored
        if _BLOCK - off % _BLOCK < _HEADER:  # block trailer padding
            off += _BLOCK - off % _BLOCK
            continue
        _crc, n, kind = struct.unpack("<IHB", data[off : off + _HEADER])
        off += _HEADER
        chunk = data[off : off + n]
        off += n
        if len(chunk) < n:
            return
        if kind == 1:
            yield chunk
        elif kind == 2:
            buf = chunk
        elif kind == 3:
            buf += chunk
        elif kind == 4:
            yield buf + chunk
            buf = b""


def _key(item) -> str:
    return item.key or "/".join(item.nested_key)


def read_offline_run(path: str | Path) -> OfflineRun:
    """Parse one ``.wandb`` file (or the run folder holding it)."""
    from wandb.proto import wandb_internal_pb2 as pb

    path = Path(path)
    if path.is_dir():
        files = sorted(path.glob("run-*.wandb"))
        if not files:
            raise FileNotFoundError(f"no run-*.wandb in {path}")
        path = files[0]
    from google.protobuf.message import DecodeError

    run = OfflineRun(path=path)
    for raw in iter_records(path):
        rec = pb.Record()
        try:
            rec.ParseFromString(raw)
        except DecodeError:  # a truncated last record: the writer was killed (e.g. SLURM preemption)
            break
        kind = rec.WhichOneof("record_type")
        if kind == "history":
            run.history.append({_key(i): json.loads(i.value_json) for i in rec.history.item})
        elif kind == "summary":
            run.summary.update({_key(u): json.loads(u.value_json) for u in rec.summary.update})
        elif kind == "config":
            for u in rec.config.update:
                run.config[_key(u)] = json.loads(u.value_json)
        elif kind == "metric":
            m = rec.metric
            run.metrics.append({"name": m.name, "glob_name": m.glob_name, "step_metric": m.step_metric})
        elif kind == "exit":
            run.exit_code = int(rec.exit.exit_code)
        elif kind == "artifact":
            a = rec.artifact
            staged = {e.path: e.local_path for e in a.manifest.contents}
            run.artifacts.append(OfflineArtifact(a.name, a.type, a.client_id, staged))
        elif kind == "run":
            r = rec.run
            run.run_id, run.project, run.group, run.name = r.run_id, r.project, r.run_group, r.display_name
            run.tags = list(r.tags)
            for u in r.config.update:
                run.config[_key(u)] = json.loads(u.value_json)
    return run


def find_offline_runs(root: str | Path) -> list[Path]:
    """All offline run folders under ``root`` (e.g. a run or sweep directory)."""
    return sorted(p.parent for p in Path(root).rglob("offline-run-*/run-*.wandb"))
