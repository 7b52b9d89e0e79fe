"""Config errors: what the command line reports as a message (no traceback, exit code 2), and how the config checks
of every component collect them, so that a user sees all of a config's errors at once.

A message always starts with the config key it is about and ends with the fix, e.g.
``method.clip_range: must be > 0 (got -0.1); DanceGRPO and Flow-GRPO use 1e-4``.
"""

from __future__ import annotations

import contextlib
from typing import Iterator


class ConfigError(ValueError):
    """A composed config that cannot run. The message names the config key and the fix."""


def require(ok: bool, key: str, message: str) -> None:
    """Raise ``ConfigError("<key>: <message>")`` unless ``ok``: for a check that must stop at once (a component
    built outside the launcher, or a value only known once a model is loaded)."""
    if not ok:
        raise ConfigError(f"{key}: {message}")


class ConfigErrors:
    """Collects the failed checks of one config (each component's ``check(cfg, errors)`` hook adds its own);
    :meth:`raise_if_any` then raises one :class:`ConfigError` listing them all.

    A check of a component nested inside another (a reward inside ``reward=multi``) gets a view from :meth:`under`,
    whose keys name the nested place (``reward.path`` becomes ``reward.components.hps.path``).
    """

    def __init__(self) -> None:
        self.messages: list[str] = []
        self._rename = ("", "")

    def key(self, key: str) -> str:
        """The full name of ``key`` where this collector checks (itself unless it is a view from :meth:`under`)."""
        old, new = self._rename
        if old and (key == old or key.startswith(old + ".")):
            return new + key[len(old) :]
        return key

    def require(self, ok: bool, key: str, message: str) -> bool:
        """Record ``<key>: <message>`` unless ``ok``; returns ``ok`` (so a check can skip what depends on it)."""
        with self.collect():
            require(ok, self.key(key), message)
        return ok

    @contextlib.contextmanager
    def collect(self) -> Iterator[None]:
        """Record a :class:`ConfigError` raised inside the block (by code that checks by raising) and go on."""
        try:
            yield
        except ConfigError as e:
            self.messages.append(str(e))

    def under(self, key: str, nested_key: str) -> ConfigErrors:
        """A view that records into this collector, with ``key`` (and the keys below it) renamed ``nested_key``."""
        view = ConfigErrors()
        view.messages = self.messages
        view._rename = (key, self.key(nested_key))
        return view

    def raise_if_any(self) -> None:
        if len(self.messages) == 1:
            raise ConfigError(self.messages[0])
        if self.messages:
            listed = "\n".join(f"  - {m}" for m in self.messages)
            raise ConfigError(f"{len(self.messages)} config errors:\n{listed}")
