"""Errors the command line turns into a one-line message and exit code 2 (no traceback unless --debug)."""

from __future__ import annotations


class UsageError(Exception):
    """Bad input from the user: a study file, a configuration, an option or a storage that cannot be used.

    The message is one line naming what is wrong and what is allowed.
    """


class AllTrialsFailed(Exception):
    """A run in which no trial completed because every one met an unexpected error in dse (a bug, not the
    user's input): the command line prints the message as one line and exits 1."""


#: the user attribute marking a trial failed by an unexpected error (a bug), not by its input
INTERNAL_ERROR_ATTR = "internal_error"


class StudyWarning(UserWarning):
    """What a user should know about a stored study before trusting what a command prints from it (the
    command line prints it as one line, ``dse: warning: ...``)."""


#: exit codes of the ``dse`` command (documented in ``dse --help`` and the README)
EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
