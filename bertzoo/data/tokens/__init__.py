"""bertzoo/data/tokens."""
