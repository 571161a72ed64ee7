"""The data pipeline, one folder per stage: raw text -> documents (`text/`) -> tokens and shards (`tokens/`) ->
pretraining examples and masked batches (`pretraining/`); fine-tuning data is `tasks/`.

docs = read_documents(["builtin:wiki-en"])                              # text/corpus.py, text/builtin.py
tok = train_wordpiece(docs, 30000)                                      # tokens/train_tokenizer.py
prepare_shards(read_documents(["builtin:wiki-en"]), tok, "data/wiki")   # tokens/shards.py
ds = NspDataset(ShardedCorpus("data/wiki"), tok, 128, seed=0)           # pretraining/examples.py, plans.py
collate = PretrainingCollator(tok, MaskingConfig(), seed=0)             # pretraining/collate_mlm.py, masking.py
"""

from bertzoo.batch import pad_batch
from bertzoo.data.pretraining.collate_mlm import PretrainingCollator
from bertzoo.data.pretraining.examples import NspDataset
from bertzoo.data.pretraining.masking import SELECTORS, corrupt, mask_tokens, select_tokens
from bertzoo.data.pretraining.plans import EpochPlan, build_plan
from bertzoo.data.rng import KeyedRNG, integers, uniform
from bertzoo.data.text.builtin import BUILTIN_CORPORA, iter_builtin, wiki_records, wiki_split, wiki_topics
from bertzoo.data.text.corpus import ReadStats, clean_text, read_documents, split_sentences
from bertzoo.data.tokens.shards import ShardedCorpus, ShardInfo, is_shard_dir, prepare_shards
from bertzoo.data.tokens.tokenizer import SPECIAL_TOKENS, Encoded, SpecialIds, Tokenizer
from bertzoo.data.tokens.train_tokenizer import train_wordpiece

__all__ = [
    "BUILTIN_CORPORA",
    "SELECTORS",
    "SPECIAL_TOKENS",
    "Encoded",
    "EpochPlan",
    "KeyedRNG",
    "NspDataset",
    "PretrainingCollator",
    "ReadStats",
    "ShardInfo",
    "ShardedCorpus",
    "SpecialIds",
    "Tokenizer",
    "build_plan",
    "clean_text",
    "corrupt",
    "integers",
    "is_shard_dir",
    "iter_builtin",
    "mask_tokens",
    "pad_batch",
    "prepare_shards",
    "read_documents",
    "select_tokens",
    "split_sentences",
    "train_wordpiece",
    "uniform",
    "wiki_records",
    "wiki_split",
    "wiki_topics",
]
