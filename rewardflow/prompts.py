"""The prompt list of a run's ``data`` config (``data.prompts`` inline, or the file at ``data.path``), read the same way
by the prompt source (:mod:`launcher.train.data`) and by the config checks of components that need the prompts (a reward
that scores a colour named in each prompt)."""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

from rewardflow.errors import ConfigError

SUPPORTED = (".txt", ".jsonl")
#: how prompt files are decoded unless ``data.encoding`` names another codec
DEFAULT_ENCODING = "utf-8"


def load_prompts(
    prompts: list[str] | None,
    path: str | None,
    field: str = "prompt",
    encoding: str = DEFAULT_ENCODING,
    key: str = "data.path",
) -> list[str]:
    """Read and check the prompt list. Errors name the config key (``key``: ``data.path``, or ``eval.prompts`` for
    the held-out prompts; ``data.field``, ``data.encoding``) and the fix."""
    if path is None:
        if not prompts:
            raise ConfigError("data: no prompts. Fix: data=demo, or data=file data.path=/path/prompts.txt")
        return [str(p) for p in prompts]
    p = Path(path).expanduser()
    kind = not_a_file(p)
    if kind:
        raise ConfigError(
            f"{key}={path!r}: {kind}. Fix: point {key} at a .txt (one prompt per line) "
            f"or .jsonl file (one JSON object per line with key data.field={field!r})"
        )
    if p.suffix not in SUPPORTED:
        raise ConfigError(f"{key}={path!r}: unsupported extension {p.suffix!r}; use one of {SUPPORTED}")
    out: list[str] = []
    for n, line in enumerate(read_text(p, path, encoding, key).split("\n"), 1):
        line = line.strip()
        if not line:
            continue
        if p.suffix == ".txt":
            out.append(line)
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{key}={path!r} line {n}: not valid JSON ({e.msg})") from None
        if not isinstance(row, dict) or field not in row:
            raise ConfigError(f"{key}={path!r} line {n}: no key {field!r}. Fix: data.field=<key>")
        value = row[field]
        if not isinstance(value, str):
            raise ConfigError(
                f"{key}={path!r} line {n}: {field!r} is {json_kind(value)}, not a string: a prompt is a JSON string "
                f'(e.g. {{"{field}": "a red square"}}). Fix: write the prompt text there, or remove line {n}'
            )
        out.append(value)
    if not out:
        raise ConfigError(f"{key}={path!r} holds no prompts")
    return out


def not_a_file(p: Path) -> str | None:
    """What the path ``p`` is when it is not a regular file that can be read (None when it is one): a missing file,
    a folder, a symlink loop, a symlink to nothing, a FIFO (reading one would wait for a writer), a socket or a
    device."""
    try:
        mode = p.stat().st_mode
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "is a symlink loop (a link that leads back to itself)"
        if e.errno == errno.ENOENT and p.is_symlink():
            return f"is a symlink to {os.readlink(p)!r}, which does not exist"
        if e.errno == errno.ENOENT:
            return "no such file"
        return f"cannot be read ({e.strerror})"
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "is a folder, not a file"
    if stat.S_ISFIFO(mode):
        return "is a FIFO (named pipe), not a file"
    if stat.S_ISSOCK(mode):
        return "is a socket, not a file"
    return "is a device, not a file"


def json_kind(value: object) -> str:
    """How a JSON value reads in a message: ``null``, ``a number``, ``a list``, ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {json.dumps(value)}"
    if isinstance(value, (int, float)):
        return f"the number {json.dumps(value)}"
    return "a list" if isinstance(value, list) else "an object"


def read_text(p: Path, path: str, encoding: str, key: str = "data.path") -> str:
    """The file's text; a binary file, bytes that are not ``encoding`` or an unknown codec name a :class:`ConfigError`
    (a ``UnicodeDecodeError`` traceback before)."""
    try:
        data = p.read_bytes()
    except OSError as e:
        raise ConfigError(
            f"{key}={path!r} cannot be read ({e.strerror}). Fix: make it readable (`chmod +r`), or point {key} at "
            f"another prompt file"
        ) from None
    binary = ConfigError(
        f"{key}={path!r} is a binary file (NUL bytes), not {encoding} text. Fix: point {key} "
        f"at a .txt or .jsonl prompt file, or name its encoding with data.encoding=<codec> "
        f"(e.g. utf-16)"
    )
    try:
        text = data.decode(encoding)
    except LookupError:
        raise ConfigError(
            f"data.encoding={encoding!r} is not a text encoding Python knows. Fix: "
            f"data.encoding={DEFAULT_ENCODING} (or e.g. latin-1, cp1252, utf-16)"
        ) from None
    except UnicodeDecodeError as e:
        if b"\0" in data:
            raise binary from None
        raise ConfigError(
            f"{key}={path!r} is not valid {encoding} text (byte {e.start}: {e.reason}). Fix: "
            f"convert it (`iconv -f <its encoding> -t utf-8`), or name its encoding with "
            f"data.encoding=<codec> (e.g. latin-1, cp1252)"
        ) from None
    if "\0" in text:
        raise binary
    return text


def prompts_or_none(data) -> list[str] | None:
    """The prompts of the ``data`` config ``data``, or None when they cannot be read (the data check says why)."""
    try:
        return load_prompts(data.prompts, data.path, data.field, data.encoding)
    except ConfigError:
        return None
