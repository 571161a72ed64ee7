"""bertzoo/data/tasks."""
