"""Errors that end a run with a one-line message and exit code 2 (could not run)."""

from __future__ import annotations


class UsageError(Exception):
    """Bad usage or bad input: the CLI prints ``preflight: error: <message>`` and exits 2."""


EXIT_OK = 0
EXIT_NOT_READY = 1
EXIT_USAGE = 2
"""Could not run (bad usage, bad input) or could not judge the node (the run verdict ERROR)."""
