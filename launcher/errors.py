"""Errors that the command line reports as a message (no traceback)."""


class ConfigError(ValueError):
    """A composed config that cannot run. The message names the config key and the fix."""
