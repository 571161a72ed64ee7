"""bertzoo/data/pretraining."""
