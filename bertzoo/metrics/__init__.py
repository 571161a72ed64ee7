"""bertzoo/metrics."""
