"""The recipes: each assembles a run from the layers below and hands it to the engine (`bertzoo.engine`).

* `pretrain`: shards -> a family's examples and collator -> its pretraining module -> Trainer;
* `finetune`: tokenizer + encoder + task -> features -> techniques -> Trainer -> report (`evaluate`: scoring and
  batch prediction with a fine-tuned model);
* `distill`: teacher + student (`students`) -> distillation phases, with the teacher's logits and the augmented
  data cached on disk (`teacher_cache`, `augment_cache`);
* `generate`: text from a seq2seq model or a left-to-right LM; `embed`: sentence vectors from an encoder;
* `transe`: TransE entity vectors of a knowledge graph (`bertzoo kg-embed`);
* `suite`: a model fine-tuned and scored on every task of a benchmark suite (`suite_tasks`: the recipes and metrics;
  `suite_report`: the reports).
"""
