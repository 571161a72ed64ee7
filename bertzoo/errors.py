"""The one error type users see: expected failures that end with a clear message, not a traceback."""

from __future__ import annotations

import errno

# errno values that mean "no room left": the disk or the user's quota is full, or a file reached the process's
# file-size limit (`ulimit -f`, RLIMIT_FSIZE; Python ignores SIGXFSZ, so the write fails with EFBIG).
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC), errno.EFBIG})
# How writers that wrap the OS error in their own exception (safetensors, tokenizers) still name it.
DISK_FULL_WORDS = (
    "No space left",
    "Disk quota exceeded",
    "File too large",
    "os error 28",
    "os error 122",
    "os error 27",
)


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
    """True for an error that says the disk, the quota or the file-size limit is full: an OSError of one of
    those errnos, or another library's exception that quotes one (`bertzoo.io.out_of_room` also asks the disk)."""
    if isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS:
        return True
    return any(words in str(exc) for words in DISK_FULL_WORDS)


def room_problem(exc: BaseException) -> str:
    """How a message names the lack of room: the file-size limit or the disk."""
    limit = (isinstance(exc, OSError) and exc.errno == errno.EFBIG) or "File too large" in str(exc)
    return "the file-size limit (ulimit -f) was reached" if limit else "disk full"
