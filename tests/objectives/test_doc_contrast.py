"""BERT's `mlm+contrast` objective: the halves mask, the in-batch InfoNCE, and that a short run learns
to tell which halves belong together when documents have subjects."""

from __future__ import annotations

import json
import math
import random

import pytest
import torch

from bertzoo.config import load_pretrain_config
from bertzoo.data.tokens.shards import prepare_shards
from bertzoo.errors import ConfigError
from bertzoo.loading import load_pretraining
from bertzoo.models.encoder import Encoder
from bertzoo.nn.masks import halves_mask
from bertzoo.objectives.doc_contrast import in_batch_info_nce
from bertzoo.train.pretrain import pretrain
from bertzoo.variants import bert

pytestmark = pytest.mark.usefixtures("one_thread")

TINY_MODEL = {"preset": "bert-tiny", "hidden_size": 32, "num_heads": 2, "intermediate_size": 64, "max_position": 64}


def test_halves_mask_by_hand() -> None:
    pattern, half = halves_mask(torch.tensor([[1, 1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 0, 0, 0]]))
    assert half.tolist() == [[0, 0, 0, 1, 1, -1, -1], [0, 0, 1, 1, -1, -1, -1]]
    row = pattern[0].int().tolist()
    assert row[0] == [1, 1, 1, 0, 0, 0, 0]  # first half: its own three tokens
    assert row[4] == [0, 0, 0, 1, 1, 0, 0]  # second half: its own two, no padding
    assert row[5] == [0, 0, 0, 0, 0, 1, 0]  # a padded query sees only itself (never an empty row)
    assert pattern[1, 1].int().tolist() == [1, 1, 0, 0, 0, 0, 0]


def test_info_nce_by_hand() -> None:
    a = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    loss, acc = in_batch_info_nce(a, a.clone(), temperature=1.0)
    # cosine logits are the identity; each row's cross-entropy is log(1 + e^-1), both directions alike
    assert loss.item() == pytest.approx(math.log(1 + math.exp(-1)), abs=1e-6)
    assert acc.item() == 1.0
    _, wrong = in_batch_info_nce(a, a.flip(0), temperature=1.0)
    assert wrong.item() == 0.0


def test_halves_do_not_see_each_other_through_the_encoder() -> None:
    torch.manual_seed(0)
    encoder = Encoder(bert.model_config({**TINY_MODEL, "vocab_size": 40})).eval()
    ids = torch.randint(5, 40, (1, 10))
    mask = torch.ones(1, 10, dtype=torch.long)
    pattern, _ = halves_mask(mask)
    changed = ids.clone()
    changed[0, 7] = 4 if ids[0, 7] != 4 else 5  # a token of the second half
    with torch.no_grad():
        h1 = encoder(ids, pattern).last_hidden_state
        h2 = encoder(changed, pattern).last_hidden_state
    assert torch.equal(h1[0, :5], h2[0, :5])  # the first half cannot tell
    assert not torch.allclose(h1[0, 5:], h2[0, 5:])


def test_objective_args_and_data_are_checked(synthetic_shards, tmp_path) -> None:
    config = bert.model_config({**TINY_MODEL, "vocab_size": 40})
    with pytest.raises(ConfigError, match="temperature must be a positive number"):
        bert.build(config, "mlm+contrast", temperature=0)
    with pytest.raises(ConfigError, match="accepts: contrast_weight, temperature"):
        bert.build(config, "mlm+contrast", margin=1)
    with pytest.raises(ConfigError, match="remove them"):
        bert.build(config, "mlm+nsp", temperature=0.1)
    cfg = topic_config(synthetic_shards, tmp_path / "x", nsp=True)
    with pytest.raises(ConfigError, match="set data.nsp false"):
        pretrain(cfg)


def topic_docs(words: list[str], topics: int = 16, per_topic: int = 30, seed: int = 0) -> list[str]:
    """Documents whose words all come from one of `topics` disjoint word lists: two halves of a document
    share a subject, two documents mostly do not."""
    r = random.Random(seed)
    docs = []
    for d in range(per_topic * topics):
        vocab = words[(d % topics) * 20 : (d % topics + 1) * 20]
        sentences = [" ".join(r.choice(vocab) for _ in range(r.randint(6, 12))) + "." for _ in range(r.randint(3, 5))]
        docs.append(" ".join(sentences))
    return docs


def topic_config(shards, out, *, nsp: bool = False, steps: int = 4):
    return load_pretrain_config(
        None,
        {
            "model": TINY_MODEL, "objective": "mlm+contrast", "data.shards": str(shards), "data.nsp": nsp,
            "data.max_seq_len": 48, "train.output_dir": str(out), "train.batch_size": 16, "train.max_steps": steps,
            "train.lr": 2e-3, "train.warmup_steps": 5, "train.log_every": 10, "train.save_every": 0,
            "train.threads": 1, "train.precision": "fp32", "model.dropout": 0.0, "model.attention_dropout": 0.0,
        },
    )  # fmt: skip


def test_a_short_run_learns_which_halves_belong_together(synthetic_tokenizer, tmp_path) -> None:
    """16 rows per batch (chance 1/16): after 80 steps the halves find each other most of the time, and
    the saved model loads back as the plain masked LM it is."""
    words = [w for w in synthetic_tokenizer.vocab_list() if w.isalpha() and len(w) > 2][:320]
    shards = tmp_path / "shards"
    prepare_shards(topic_docs(words), synthetic_tokenizer, shards, progress=False)
    summary = pretrain(topic_config(shards, tmp_path / "run", steps=80))
    assert summary["completed"]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    accs = [r["contrast_acc"] for r in rows if "contrast_acc" in r]
    assert accs[0] < 0.5 < accs[-1], accs
    model = load_pretraining(tmp_path / "run" / "final")
    assert type(model).__name__ == "MaskedLM" and model.nsp_head is None
