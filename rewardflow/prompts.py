"""The prompt list of a run's ``data`` config (``data.prompts`` inline, or the file at ``data.path``), read the same way
by the prompt source (:mod:`launcher.data`) and by the config checks of components that need the prompts (a reward
that scores a colour named in each prompt)."""
from __future__ import annotations

import json
from pathlib import Path

from rewardflow.errors import ConfigError

SUPPORTED = (".txt", ".jsonl")


def load_prompts(prompts: list[str] | None, path: str | None, field: str = "prompt") -> list[str]:
    """Read and check the prompt list. Errors name the config key (``data.path`` / ``data.field``) and the fix."""
    if path is None:
        if not prompts:
            raise ConfigError("data: no prompts. Fix: data=demo, or data=file data.path=/path/prompts.txt")
        return [str(p) for p in prompts]
    p = Path(path).expanduser()
    if not p.is_file():
        raise ConfigError(f"data.path={path!r}: no such file. Fix: point data.path at a .txt (one prompt per line) "
                          f"or .jsonl file (one JSON object per line with key data.field={field!r})")
    if p.suffix not in SUPPORTED:
        raise ConfigError(f"data.path={path!r}: unsupported extension {p.suffix!r}; use one of {SUPPORTED}")
    out: list[str] = []
    with p.open() as fh:
        for n, line in enumerate(fh, 1):
            line = line.strip()
            if not line:
                continue
            if p.suffix == ".txt":
                out.append(line)
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ConfigError(f"data.path={path!r} line {n}: not valid JSON ({e.msg})") from None
            if not isinstance(row, dict) or field not in row:
                raise ConfigError(f"data.path={path!r} line {n}: no key {field!r}. Fix: data.field=<key>")
            out.append(str(row[field]))
    if not out:
        raise ConfigError(f"data.path={path!r} holds no prompts")
    return out


def prompts_or_none(data) -> list[str] | None:
    """The prompts of the ``data`` config ``data``, or None when they cannot be read (the data check says why)."""
    try:
        return load_prompts(data.prompts, data.path, data.field)
    except ConfigError:
        return None
