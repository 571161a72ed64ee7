"""Pretraining examples and batches: examples built from shards (`plans`, `examples`, `token_batches`), masking in two
steps (`masking`: select positions, then corrupt them), and one collator module per kind of batch, named for what
it builds: `collate_mlm` (masked and causal LM), `collate_units` (whole words, spans, phrases, entities; ERNIE's
stages), `collate_plm` (XLNet's permutation LM), `collate_unilm` (UniLM's four masks), `collate_seq2seq` (T5's
noise objectives and MASS), `collate_entities` (ERNIE-THU's entity corruption), `collate_tasks` (ERNIE 2.0's auxiliary
tasks beside masking, their examples built by `task_examples`)."""
