"""Errors meant for the person at the terminal.

Anything raised as :class:`DraconfError` is printed by the CLI as one message without a
traceback: it must say what went wrong and what to do about it.
"""


class DraconfError(Exception):
    """A failure the user can act on; ``str(err)`` is the whole message."""
