"""The one error type the compare command turns into a message instead of a traceback."""


class CompareError(ValueError):
    """Input that cannot be compared as asked (no runs, mixed groups, unknown baseline...). The message says what
    was found and how to fix the command line."""
