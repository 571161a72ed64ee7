"""Text: reading corpora as cleaned documents (text, JSONL, directories, `builtin:` corpora from pip data
packages), C4's web-text cleaning, and the `word/TAG` format of segmented Chinese text."""
