"""bertzoo/knowledge."""
