"""Tokens: subword tokenizers (WordPiece, byte-level BPE, Unigram through the `tokenizers` library), the
memory-mapped shards a corpus is tokenized into once, the word / phrase / entity units beside them (annotation,
segmenters, unit flags and sidecars), and count-based word vectors of a token stream."""
