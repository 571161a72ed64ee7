"""The masked-LM objective hands a batch's packed documents (`document_ids`) to the encoder."""

from __future__ import annotations

import torch

from bertzoo.batch import Batch
from bertzoo.variants import get_variant


def test_encode_keeps_packed_documents_apart() -> None:
    family = get_variant("roberta")
    sizes = dict(vocab_size=40, hidden_size=16, num_layers=2, num_heads=2, intermediate_size=32, max_position=16)
    torch.manual_seed(0)
    model = family.build(family.model_config({**sizes, "dropout": 0.0, "attention_dropout": 0.0})).eval()
    ids = torch.tensor([[0, 7, 8, 2, 9, 10, 11, 2]])
    docs = torch.tensor([[0, 0, 0, 0, 1, 1, 1, 1]])
    mask = torch.ones_like(ids)
    with torch.no_grad():
        packed = model.encode(Batch(ids, mask, extra={"document_ids": docs})).last_hidden_state[0]
        alone = model.encode(Batch(ids[:, 4:], mask[:, 4:])).last_hidden_state[0]
        together = model.encode(Batch(ids, mask)).last_hidden_state[0]  # RoBERTa's FULL-SENTENCES: one sequence
    torch.testing.assert_close(packed[4:], alone, atol=1e-6, rtol=0)
    assert not torch.allclose(together[4:], alone, atol=1e-3)
