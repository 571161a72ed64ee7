"""bertzoo/data/text."""
