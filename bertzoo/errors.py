"""The one error type users see: expected failures that end with a clear message, not a traceback."""

from __future__ import annotations


class BertzooError(Exception):
    """An expected failure caused by input or configuration.

    The message is one line naming the problem and the fix. The CLI prints it and exits with
    code 2; library users catch it like any exception.
    """


class ConfigError(BertzooError):
    """A configuration value is unknown, missing or out of range."""


class DataError(BertzooError):
    """A corpus, shard or dataset cannot be read or is unusable (empty, wrong format)."""


class CheckpointError(BertzooError):
    """A checkpoint is missing, incomplete, unsafe or does not match the model."""
