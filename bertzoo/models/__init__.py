"""bertzoo/models."""
