"""Fine-tuning data: readers of users' files (CSV/TSV/JSONL, CoNLL, SQuAD, SWAG, `datasets` saved to disk),
the built-in labelled datasets, multi-task mixtures, and TinyBERT's data augmentation."""
