"""Every file of a checkpoint with its size and sha256 in ``meta.json`` (docs/resume.md#damaged-checkpoints).

A shard of the right size but the wrong content (flipped bytes on a failing disk, a file copied from another run)
used to load without a word and show up later as "grad norm nan, step skipped". With ``trainer.checkpoint_checksums``
(the default) a checkpoint records each file's size and sha256; resume compares them before loading, and a mismatch
makes the checkpoint damaged (set aside, the previous one used, the file named in the warning).

The hashing is shared out: in a synchronous save each rank hashes the files it wrote (its DCP shards
``__<rank>_*.distcp`` and its RNG file) before the ranks meet, into ``digests_rank_<rank>.json``; rank 0's commit
merges them and hashes what is left (DCP's ``.metadata``; in an asynchronous save, everything, in the background
thread). On resume each rank verifies every world_size-th file.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

_DIGESTS = "digests_rank_{rank:05d}.json"
_NOT_HASHED = {"meta.json", "COMPLETE"}  # written after the digests, by the commit


def _digest(path: Path) -> list:
    with open(path, "rb") as fh:
        return [path.stat().st_size, hashlib.file_digest(fh, "sha256").hexdigest()]


def write_own(folder: Path, rank: int) -> None:
    """This rank's files of the checkpoint being written in ``folder``, hashed into its digests file."""
    mine = [p for p in folder.iterdir() if p.name.startswith(f"__{rank}_") or p.name == f"rank_{rank:05d}.pt"]
    digests = {p.name: _digest(p) for p in sorted(mine)}
    (folder / _DIGESTS.format(rank=rank)).write_text(json.dumps(digests))


def collect(folder: Path) -> dict[str, list]:
    """Rank 0, every rank's files written: ``{file name: [size, sha256]}`` for every file of the checkpoint (the
    ranks' digests merged and removed, the rest hashed here)."""
    files: dict[str, list] = {}
    for part in sorted(folder.glob("digests_rank_*.json")):
        files.update(json.loads(part.read_text()))
        part.unlink()
    for path in sorted(folder.iterdir()):
        if path.is_file() and path.name not in files and path.name not in _NOT_HASHED:
            files[path.name] = _digest(path)
    return dict(sorted(files.items()))


def size_problem(folder: Path, files: dict[str, list]) -> str | None:
    """A file missing or of another size than recorded (cheap: no byte is read)."""
    for name, (size, _) in files.items():
        path = folder / name
        if not path.is_file():
            return f"{name} is missing (meta.json lists it)"
        if path.stat().st_size != size:
            return f"{name} is {path.stat().st_size} bytes, meta.json records {size}"
    return None


def content_problem(folder: Path, files: dict[str, list], rank: int, world_size: int) -> str | None:
    """This rank's share of the files (every ``world_size``-th) whose sha256 differs from the recorded one."""
    for name in sorted(files)[rank::world_size]:
        if _digest(folder / name)[1] != files[name][1]:
            return f"{name} does not match its sha256 in meta.json (changed after it was written)"
    return None
