"""The command line: `bertzoo COMMAND ...` (also `python -m bertzoo`), one module per command.

`app` parses and dispatches; `common` holds what the commands share; `python -m bertzoo.cli.annotate` writes
the unit flags of a shard directory ahead of pretraining.
"""

from bertzoo.cli.app import build_parser, entry, main

__all__ = ["build_parser", "entry", "main"]
