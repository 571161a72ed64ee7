"""Fine-tuning data: readers of users' files (CSV/TSV/JSONL, CoNLL, SQuAD, SWAG, parquet, arrow and `hf-dataset:`
through `datasets`), GLUE's and CLUE's official layouts, the built-in labelled datasets, multi-task mixtures, and
TinyBERT's data augmentation."""
