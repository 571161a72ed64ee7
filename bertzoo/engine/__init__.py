"""bertzoo/engine."""
