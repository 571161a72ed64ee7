"""One place builds a from-scratch model's config (bertzoo.variants.scratch_config): pretraining, fine-tuning
from random init and a random distillation student all take the vocabulary size, padding id and the family's
own tokenizer-dependent fields from it, each only where the spec leaves them unset."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from bertzoo.errors import ConfigError
from bertzoo.train.students import random_encoder
from bertzoo.variants import bert, get_variant, model_config_of, scratch_config

TOKENIZER = SimpleNamespace(vocab_size=123, pad_id=3, mask_id=7)


def test_vocabulary_and_padding_come_from_the_tokenizer_unless_the_spec_sets_them() -> None:
    config = scratch_config(bert.FAMILY, {"preset": "bert-tiny"}, TOKENIZER)
    assert (config.vocab_size, config.pad_token_id) == (123, 3)
    config = scratch_config(bert.FAMILY, {"preset": "bert-tiny", "vocab_size": 200, "pad_token_id": 0}, TOKENIZER)
    assert (config.vocab_size, config.pad_token_id) == (200, 0)


def test_family_fields_from_the_tokenizer() -> None:
    t5 = scratch_config(get_variant("t5"), {"preset": "t5-tiny"}, TOKENIZER)
    assert t5.pad_token_id is None  # T5's pad id is the decoder's start token: no frozen padding row
    assert t5.decoder_start_token_id == 3
    variant, mass = model_config_of({"variant": "mass", "preset": "mass-tiny"}, TOKENIZER)
    assert variant is get_variant("mass")
    assert mass.decoder_start_token_id == 7  # MASS's decoder starts from [MASK]


def test_model_config_of_defaults_to_bert_and_names_an_unknown_variant() -> None:
    variant, _ = model_config_of({"preset": "bert-tiny"}, TOKENIZER)
    assert variant is bert.FAMILY
    with pytest.raises(ConfigError, match="unknown variant 'bret'"):
        model_config_of({"variant": "bret"}, TOKENIZER)


def test_a_random_student_is_built_for_the_tokenizer_and_seeded() -> None:
    a = random_encoder({"preset": "bert-tiny"}, TOKENIZER, seed=0)
    b = random_encoder({"preset": "bert-tiny"}, TOKENIZER, seed=0)
    c = random_encoder({"preset": "bert-tiny"}, TOKENIZER, seed=1)
    assert a.config.vocab_size == 123
    weight = a.embeddings.word.weight
    assert torch.equal(weight, b.embeddings.word.weight)
    assert not torch.equal(weight, c.embeddings.word.weight)
    assert torch.count_nonzero(weight[3]) == 0  # the tokenizer's padding row
    with pytest.raises(ConfigError, match="student.model_config"):
        random_encoder({}, TOKENIZER, seed=0)
