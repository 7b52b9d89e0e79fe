"""The prompt list of a run's ``data`` config (``data.prompts`` inline, or the file at ``data.path``), read the same way
by the prompt source (:mod:`launcher.train.data`) and by the config checks of components that need the prompts (a reward
that scores a colour named in each prompt); and how many of them a run holds out of training for its evaluation."""

from __future__ import annotations

import errno
import json
import logging
import os
import stat
from pathlib import Path
from typing import Any

from rewardflow.errors import ConfigError

log = logging.getLogger(__name__)

SUPPORTED = (".txt", ".jsonl")
#: longest prompt kept, in characters. The longest text context of any family is 1024 tokens (Qwen-Image's ceiling;
#: FLUX, Wan2.1 and SD3.5 take 512 or fewer), and text averages far fewer than 32 characters a token, so a prompt cut
#: here is cut where every text encoder would cut it anyway; the rest would only cost time: a 10 MB
#: one-line prompt, tokenized whole in every batch and every reward call, made 2 steps take 266 s and 5.5 GB.
MAX_PROMPT_CHARS = 32 * 1024
_warned: set[tuple[str, str | None]] = set()
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
        return cut_long_prompts([str(p) for p in prompts], key, None)
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
    return cut_long_prompts(out, key, path)


def cut_long_prompts(prompts: list[str], key: str, path: str | None) -> list[str]:
    """``prompts`` with each one longer than :data:`MAX_PROMPT_CHARS` cut there, and one warning per prompt list
    (the list is read by the config check, the prompt source and the evaluation: the warning is not repeated)."""
    long = [n for n, p in enumerate(prompts, 1) if len(p) > MAX_PROMPT_CHARS]
    if not long:
        return prompts
    if (key, path) not in _warned:
        _warned.add((key, path))
        where = f"{key}={path!r}" if path else key
        log.warning(
            "%s: %d prompt(s) longer than %d characters (number %s, the longest %d characters) are cut to %d: every "
            "text encoder would cut them sooner (docs/configuration.md#prompts)",
            where,
            len(long),
            MAX_PROMPT_CHARS,
            ", ".join(map(str, long[:5])) + (", ..." if len(long) > 5 else ""),
            max(len(prompts[n - 1]) for n in long),
            MAX_PROMPT_CHARS,
        )
    return [p[:MAX_PROMPT_CHARS] for p in prompts]


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


def data_prompts(data) -> list[str]:
    """The training prompts of the ``data`` config: a named set's split (``data.set``, ``data.split``; ``data.path``
    then names a local copy of the split's file), else ``data.prompts`` or the file at ``data.path``."""
    from rewardflow.prompt_sets import set_prompts, split_files

    if getattr(data, "set", None) is not None:
        split_files(data.set, data.split)  # the split exists (DrawBench has no train split)
        if data.path is not None:  # a local copy of the split's file: each prompt once, as the set's loader keeps it
            return list(dict.fromkeys(load_prompts(None, data.path, data.field, data.encoding)))
        return set_prompts(data.set, data.split, key="data.set")
    return load_prompts(data.prompts, data.path, data.field, data.encoding)


def prompts_or_none(data) -> list[str] | None:
    """The prompts of the ``data`` config ``data``, or None when they cannot be read (the data check says why)."""
    try:
        return data_prompts(data)
    except ConfigError:
        return None


def held_out_count(e: Any) -> int:
    """How many prompts of ``data`` the run holds out of training for the evaluation (``e``: the ``eval`` config).
    The precedence (docs/evaluation.md#held-out-prompts): an explicit ``eval.split=N`` (0 = none), whether or not
    evaluation is on; else, when evaluating (``eval.every`` > 0) with ``eval.prompts`` unset, ``eval.default_split``
    (data=file's default, conf/eval/file.yaml); else none: an explicit ``eval.prompts`` wins over the default split,
    and a run that does not evaluate trains on every prompt. Setting both ``eval.prompts`` and ``eval.split=N`` is a
    config error (``EvalConfig.check``, launcher/train/eval_config.py). Here, not in the launcher, because a
    checkpoint's run identity counts it too (launcher/checkpoint/run_identity.py)."""
    if e.split is not None:
        return int(e.split)
    return int(e.default_split) if e.prompts is None and e.every > 0 else 0


def held_out_key(e: Any) -> str:
    """The key that set :func:`held_out_count`, for messages: ``eval.split`` or ``eval.default_split``."""
    return "eval.split" if e.split is not None else "eval.default_split"
