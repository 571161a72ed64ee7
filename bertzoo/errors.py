"""The one error type users see: expected failures that end with a clear message, not a traceback."""

from __future__ import annotations

import errno

# errno values that mean "no room left": the disk or the user's quota is full.
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)})


class BertzooError(Exception):
    """An expected failure caused by input or configuration.

    The message is one line naming the problem and the fix. The CLI prints it and exits with
    code 2; library users catch it like any exception.
    """

    def __init__(self, message: object = "", *args: object) -> None:
        # One line even when the message quotes a multi-line error from another library.
        super().__init__(" ".join(str(message).split()), *args)


class ConfigError(BertzooError):
    """A configuration value is unknown, missing or out of range."""


class DataError(BertzooError):
    """A corpus, shard or dataset cannot be read or is unusable (empty, wrong format)."""


class CheckpointError(BertzooError):
    """A checkpoint is missing, incomplete, unsafe or does not match the model."""


class DiskFullError(BertzooError):
    """A write ran out of disk space (or quota); what was written before is left intact."""


def is_disk_full(exc: BaseException) -> bool:
    """True for an OSError that means the disk or the quota is full."""
    return isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS
