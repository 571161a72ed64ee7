"""`python -m bertzoo` runs the command line."""

from bertzoo.cli import entry

entry()
