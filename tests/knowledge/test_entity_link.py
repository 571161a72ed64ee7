"""Entity linking for ERNIE (Tsinghua): lexicon matching over WordPiece words, the shards' entity sidecar,
and examples carrying `entity_ids` laid out like their `input_ids`."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bertzoo.data.pretraining.examples import NspDataset
from bertzoo.data.tokens.shards import ShardedCorpus, prepare_shards
from bertzoo.data.tokens.tokenizer import SPECIAL_TOKENS, Tokenizer
from bertzoo.data.tokens.unit_sidecar import ENTITIES, load_sidecar
from bertzoo.errors import DataError
from bertzoo.knowledge.linking import EntityDataset, entity_lexicon, entity_sidecar, link_tokens, link_words

LEXICON = {"united_states": 0, "army": 1, "states": 2, "dog": 3, "city": 4, "it": 5, "new_york_city": 6, "york": 7}


def test_link_words_longest_match_plurals_and_stopwords():
    words = "the united states army has dogs and cities".split()
    # "united states" beats "states"; "dogs" -> dog, "cities" -> city; "the", "has", "and" never link.
    assert link_words(words, LEXICON) == [(1, 2, 0), (3, 1, 1), (5, 1, 3), (7, 1, 4)]
    # A function word that WordNet lists as a noun ("it": information technology) stays unlinked.
    assert link_words(["it", "army"], LEXICON) == [(1, 1, 1)]
    # Three words at most by default; a four-word window is not looked up.
    assert link_words("new york city".split(), LEXICON) == [(0, 3, 6)]
    assert link_words("new york city".split(), LEXICON, max_words=2) == [(1, 1, 7), (2, 1, 4)]
    # Punctuation and digits break a mention and never link.
    assert link_words(["united", ",", "states"], LEXICON) == [(2, 1, 2)]


def test_link_tokens_aligns_with_the_first_wordpiece():
    vocab = [*SPECIAL_TOKENS, "the", "unit", "##ed", "states", "ar", "##my", "dog", "##s", "."]
    continuation = np.array([t.startswith("##") for t in vocab])
    ids = np.array([vocab.index(t) for t in ["the", "unit", "##ed", "states", "ar", "##my", "dog", "##s", "."]])
    out = link_tokens(ids, vocab, continuation, LEXICON)
    assert out.dtype == np.int32
    assert out.tolist() == [-1, 0, -1, -1, 1, -1, 3, -1, -1]
    assert link_tokens(np.zeros(0, dtype=np.int64), vocab, continuation, LEXICON).tolist() == []


@pytest.fixture()
def tiny_kg_shards(tmp_path):
    words = ["the", "army", "of", "the", "united", "states", "has", "many", "dogs", "."]
    vocab = [*SPECIAL_TOKENS, *sorted(set(words))]
    (tmp_path / "vocab.txt").write_text("".join(t + "\n" for t in vocab), encoding="utf-8")
    tokenizer = Tokenizer.from_vocab(tmp_path / "vocab.txt")
    docs = ["The army of the United States has many dogs. The dogs of the army.", "Many dogs. The United States."]
    prepare_shards(docs, tokenizer, tmp_path / "shards", progress=False)
    kg = tmp_path / "kg"
    kg.mkdir()
    names = ["army", "United States", "dog"]
    (kg / "entities.json").write_text(json.dumps({"entities": ["e0", "e1", "e2"], "names": names, "kg": "tsv"}))
    return tmp_path / "shards", kg, tokenizer


def test_sidecar_links_once_and_is_reused_until_the_kg_changes(tiny_kg_shards):
    shards, kg, tokenizer = tiny_kg_shards
    assert entity_lexicon(kg) == {"army": 0, "united_states": 1, "dog": 2}
    links = entity_sidecar(shards, kg)
    corpus = ShardedCorpus(shards)
    tokens = [tokenizer.vocab_list()[t] for t in corpus.token_range(0, corpus.num_tokens).tolist()]
    values = links.range(0, corpus.num_tokens).tolist()
    # Hand-aligned: each entity at its mention's first token.
    expected = {"army": 0, "united": 1, "dogs": 2}
    assert values == [expected.get(t, -1) for t in tokens]
    assert links.meta["mentions"] == 7 and links.meta["distinct_entities"] == 3
    stored = load_sidecar(shards, ENTITIES)
    assert stored is not None and stored.range(0, corpus.num_tokens).tolist() == values
    # A different entities file links again (the stored sidecar names the old one).
    meta = json.loads((kg / "entities.json").read_text())
    meta["names"] = ["dog", "army", "states"]
    (kg / "entities.json").write_text(json.dumps(meta))
    relinked = entity_sidecar(shards, kg).range(0, corpus.num_tokens).tolist()
    assert relinked == [{"dogs": 0, "army": 1, "states": 2}.get(t, -1) for t in tokens]


def test_entity_dataset_lays_links_out_like_input_ids(tiny_kg_shards):
    shards, kg, tokenizer = tiny_kg_shards
    corpus = ShardedCorpus(shards)
    inner = NspDataset(corpus, tokenizer, max_seq_len=16, seed=0, nsp=True, short_seq_prob=0.0)
    data = EntityDataset(inner, entity_sidecar(shards, kg))
    vocab = tokenizer.vocab_list()
    expected = {"army": 0, "united": 1, "dogs": 2}
    seen = 0
    for i in range(len(data)):
        ex = data[i]
        tokens = [vocab[t] for t in ex["input_ids"].tolist()]
        assert ex["entity_ids"].tolist() == [expected.get(t, -1) for t in tokens]  # [CLS]/[SEP] get -1
        seen += int((ex["entity_ids"] >= 0).sum())
    assert seen > 0


def test_missing_entities_file_names_the_command(tmp_path, tiny_kg_shards):
    shards, _, _ = tiny_kg_shards
    with pytest.raises(DataError, match="bertzoo kg-embed"):
        entity_sidecar(shards, tmp_path / "nowhere")


def test_linker_links_each_row_of_a_padded_batch(tiny_kg_shards):
    import torch

    from bertzoo.knowledge.linking import EntityLinker

    _, kg, tokenizer = tiny_kg_shards
    linker = EntityLinker(tokenizer, kg)
    vocab = tokenizer.vocab_list()
    rows = [["[CLS]", "the", "army", "[SEP]", "[PAD]"], ["[CLS]", "dogs", "of", "united", "states"]]
    ids = torch.tensor([[vocab.index(t) for t in r] for r in rows])
    assert linker(ids).tolist() == [[-1, -1, 0, -1, -1], [-1, 2, -1, 1, -1]]
    # Extra leading dims (pairs in both orders, multiple choice) keep their shape.
    assert linker(ids.view(1, 2, 5)).shape == (1, 2, 5)


def fake_wordnet(root):
    """WordNet's index files, the only ones the lexicon reads: "dog" has two noun senses (the first the most
    frequent), "army" one, "run" a verb sense."""
    header = "  1 This software and database is being provided to you, the LICENSEE, by  \n"
    index = {
        "noun": "army n 1 1 @ 1 0 08191230  \ndog n 2 1 @ 2 1 02084071 10114209  \n",
        "verb": "run v 1 1 @ 1 0 01926311  \n",
        "adj": "",
        "adv": "",
    }
    d = root / "wordnet"
    d.mkdir()
    for pos, text in index.items():
        (d / f"index.{pos}").write_text(header + text, encoding="utf-8")
    return d


def test_wordnet_lexicon_takes_the_first_sense_in_the_graph_and_refuses_foreign_ids(tmp_path):
    wordnet = fake_wordnet(tmp_path)
    meta = {"kg": "wordnet", "entities": ["n.10114209", "n.08191230", "v.01926311"]}
    # dog's most frequent sense (02084071) is not in this graph: its next one is.
    assert entity_lexicon(meta, wordnet) == {"army": 1, "dog": 0, "run": 2}
    meta["entities"].append("n.99999999")
    with pytest.raises(DataError, match="1 of the 4 entities .* not synsets of this WordNet .*'n.99999999'") as info:
        entity_lexicon(meta, wordnet)
    assert "\n" not in str(info.value)
