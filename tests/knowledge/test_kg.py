"""Knowledge graphs and TransE (docs/knowledge.md): WordNet's data files, PyKEEN's packaged graphs, TSV files,
seeded splits, filtered ranks, training, the entity-embedding directory and `bertzoo kg-embed`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import bertzoo.knowledge.graphs as kg_module
from bertzoo.cli import main
from bertzoo.errors import CheckpointError, DataError
from bertzoo.knowledge.graphs import (
    ENTITIES_FILE,
    KnowledgeGraph,
    PykeenMissingError,
    WordNetMissingError,
    lemma_index,
    load_entity_embeddings,
    load_kg,
    read_wordnet,
    read_wordnet_synsets,
    split_graph,
    wordnet_triples,
)
from bertzoo.knowledge.transe import TransE, bernoulli_head_probs
from bertzoo.metrics.link_prediction import filtered_ranks, hits_at, mrr
from bertzoo.train.transe import train_transe

HEADER = "  1 This software and database is being provided to you, the LICENSEE, by  \n  2 Princeton University \n"
# Debian wordnet-base's format: offset lex_filenum ss_type w_cnt(2 hex digits) [word lex_id]... p_cnt(3 digits)
# [symbol offset pos source/target]... (verbs: frames) | gloss
DATA_NOUN = HEADER + (
    "00001740 03 n 01 entity 0 002 ~ 00002137 n 0000 ~ 00003000 n 0000 | that which is perceived  \n"
    "00002137 03 n 02 abstraction 0 abstract_entity 0 003 @ 00001740 n 0000 + 00010000 v 0101 "
    "-u 00003000 n 0000 | a general concept  \n"
    # w_cnt 0a: ten words (read as decimal, "0a" is no number; ten words, not zero or one)
    "00003000 05 n 0a alpha 0 beta 0 gamma 0 delta 0 epsilon 0 zeta 0 eta 0 theta 0 iota 0 kappa 0 005 "
    "@ 00002137 n 0000 @i 00001740 n 0000 #m 00001740 n 0000 %p 00002137 n 0000 @ 00002137 n 0000 "
    "| a made-up synset; its gloss has a | bar  \n"
)
DATA_VERB = HEADER + (
    "00010000 29 v 01 abstract 0 002 + 00002137 n 0101 * 00020000 v 0000 01 + 08 00 | consider abstractly  \n"
)
DATA_ADJ = HEADER + (
    "00030000 00 s 01 galore(ip) 0 001 & 00040000 a 0000 | in abundance  \n"
    "00040000 00 a 01 abundant 0 001 & 00030000 s 0000 | present in great quantity  \n"
)
INDEX_NOUN = HEADER + (
    "abstraction n 1 2 @ ~ 1 0 00002137  \nentity n 1 1 ~ 1 1 00001740  \nalpha n 2 1 @ 2 0 00003000 00002137  \n"
)
INDEX_VERB = HEADER + "abstract v 1 1 + 1 0 00010000  \n"

NOUN_TRIPLES = [
    ("n.00002137", "_hypernym", "n.00001740"),
    ("n.00002137", "_member_of_domain_usage", "n.00003000"),
    ("n.00003000", "_hypernym", "n.00002137"),
    ("n.00003000", "_instance_hypernym", "n.00001740"),
    ("n.00003000", "_has_part", "n.00002137"),
]


@pytest.fixture()
def wordnet_dir(tmp_path: Path) -> Path:
    files = {
        "data.noun": DATA_NOUN,
        "data.verb": DATA_VERB,
        "data.adj": DATA_ADJ,
        "data.adv": HEADER,
        "index.noun": INDEX_NOUN,
        "index.verb": INDEX_VERB,
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    return tmp_path


def test_wordnet_nouns_give_the_wn18rr_triples_between_noun_synsets(wordnet_dir):
    entities, names, relations, triples = wordnet_triples(read_wordnet_synsets(wordnet_dir, pos=("n",)))
    assert entities == ["n.00001740", "n.00002137", "n.00003000"]
    assert names == ["entity", "abstraction", "alpha"]
    # Hyponym (~) and member holonym (#m) are not WN18RR relations; the pointer to a verb leaves the graph;
    # the repeated hypernym pointer is one triple.
    assert triples == NOUN_TRIPLES
    assert relations == ["_hypernym", "_instance_hypernym", "_has_part", "_member_of_domain_usage"]


def test_wordnet_all_parts_of_speech(wordnet_dir):
    entities, names, _, triples = wordnet_triples(read_wordnet_synsets(wordnet_dir, pos=("n", "v", "a", "r")))
    assert entities[3:] == ["v.00010000", "a.00030000", "a.00040000"]
    assert names[3:] == ["abstract", "galore", "abundant"]  # the adjective marker "(ip)" is not part of the name
    assert triples == [
        NOUN_TRIPLES[0],
        ("n.00002137", "_derivationally_related_form", "v.00010000"),
        *NOUN_TRIPLES[1:],
        ("v.00010000", "_derivationally_related_form", "n.00002137"),
        ("a.00030000", "_similar_to", "a.00040000"),  # a satellite (s) lives in data.adj
        ("a.00040000", "_similar_to", "a.00030000"),
    ]


def test_read_wordnet_indexes_the_triples(wordnet_dir):
    kg = read_wordnet(wordnet_dir, pos=("n",), valid_fraction=0, test_fraction=0)
    assert kg.source == "wordnet-nouns" and kg.train.dtype == np.int64
    named = [(kg.entities[h], kg.relations[r], kg.entities[t]) for h, r, t in kg.train.tolist()]
    assert named == NOUN_TRIPLES
    assert kg.valid.shape == (0, 3) and kg.test.shape == (0, 3)


def test_lemma_index_keeps_wordnet_sense_order(wordnet_dir):
    index = lemma_index(wordnet_dir, pos=("n", "v"))
    assert index["alpha"] == ["n.00003000", "n.00002137"]
    assert index["abstraction"] == ["n.00002137"]
    assert index["abstract"] == ["v.00010000"]
    assert len(index) == 4


def test_missing_wordnet_names_the_install_command(tmp_path):
    with pytest.raises(WordNetMissingError, match="apt-get install wordnet-base"):
        read_wordnet(tmp_path / "nowhere")


def _triangles(n: int = 20) -> KnowledgeGraph:
    """n groups (a_i, b_i, c_i) with r1: a -> b, r2: b -> c, r3: a -> c, so e_c - e_a = r1 + r2 = r3 for every
    group: a held-out edge of a triangle follows from the other two (a translation model can get it)."""
    entities = [f"{k}{i}" for i in range(n) for k in "abc"]
    triples = [t for i in range(n) for t in ((3 * i, 0, 3 * i + 1), (3 * i + 1, 1, 3 * i + 2), (3 * i, 2, 3 * i + 2))]
    empty = np.zeros((0, 3), np.int64)
    return KnowledgeGraph(entities, ["r1", "r2", "r3"], entities, np.array(triples), empty, empty, "triangles")


def test_seeded_split_is_a_partition_and_keeps_every_held_out_entity_in_train():
    whole = _triangles()
    kg = split_graph(whole, seed=3, valid_fraction=0.1, test_fraction=0.15)
    again = split_graph(whole, seed=3, valid_fraction=0.1, test_fraction=0.15)
    other = split_graph(whole, seed=4, valid_fraction=0.1, test_fraction=0.15)
    assert (len(kg.train), len(kg.valid), len(kg.test)) == (45, 6, 9)
    assert all(np.array_equal(getattr(kg, s), getattr(again, s)) for s in ("train", "valid", "test"))
    assert not np.array_equal(kg.test, other.test)
    rows = sorted(map(tuple, np.concatenate([kg.train, kg.valid, kg.test]).tolist()))
    assert rows == sorted(map(tuple, whole.train.tolist()))
    seen = set(kg.train[:, [0, 2]].ravel().tolist())
    held = np.concatenate([kg.valid, kg.test])
    assert set(held[:, [0, 2]].ravel().tolist()) <= seen
    assert set(held[:, 1].tolist()) <= set(kg.train[:, 1].tolist())


def test_split_never_holds_out_an_entity_s_only_triple():
    # Entity 3 appears in one triple, entity 4 in one self-loop, relation 1 in one triple: those stay in train.
    triples = np.array([(0, 0, 1), (1, 0, 2), (2, 0, 0), (0, 0, 2), (3, 0, 0), (4, 0, 4), (0, 1, 1)])
    names = [str(i) for i in range(5)]
    empty = np.zeros((0, 3), np.int64)
    kg = KnowledgeGraph(names, ["r", "s"], names, triples, empty, empty, "tiny")
    for seed in range(20):
        split = split_graph(kg, seed=seed, valid_fraction=0.3, test_fraction=0.3)
        held = {tuple(t) for t in np.concatenate([split.valid, split.test]).tolist()}
        assert len(held) >= 2 and not held & {(3, 0, 0), (4, 0, 4), (0, 1, 1)}


def test_tsv_reader_and_its_errors(tmp_path):
    path = tmp_path / "kg.tsv"
    path.write_text("paris\tcapital_of\tfrance\n\nberlin\tcapital_of\tgermany\nparis\tcapital_of\tfrance\n")
    kg = load_kg(str(path), seed=0)
    assert kg.entities == ["paris", "france", "berlin", "germany"] and kg.relations == ["capital_of"]
    assert len(kg.train) + len(kg.valid) + len(kg.test) == 2  # the duplicate line is one triple
    path.write_text("paris\tcapital_of\tfrance\nberlin capital_of germany\n")
    with pytest.raises(DataError, match=r"kg.tsv:2: expected head<TAB>relation<TAB>tail"):
        load_kg(str(path))
    with pytest.raises(DataError, match="unknown knowledge graph"):
        load_kg(str(tmp_path / "missing.tsv"))


def test_pykeen_graphs_read_in_place_with_their_official_split():
    try:
        kg = load_kg("nations")
    except PykeenMissingError:
        pytest.skip("pykeen's data files are not installed (pip install --no-deps pykeen)")
    # PyKEEN's documented Nations: 14 entities, 55 relations, 1592 / 199 / 201 triples.
    assert (kg.num_entities, kg.num_relations) == (14, 55)
    assert (len(kg.train), len(kg.valid), len(kg.test)) == (1592, 199, 201)
    assert kg.entities[:2] == ["brazil", "burma"]


def test_missing_pykeen_names_the_install_command(monkeypatch):
    monkeypatch.setattr(kg_module.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(PykeenMissingError, match=r"pip install --no-deps pykeen"):
        load_kg("umls")


@pytest.mark.skipif(not Path("/usr/share/wordnet/data.noun").is_file(), reason="Debian's wordnet-base not installed")
def test_real_wordnet_3_0():
    nouns = sum(1 for _ in read_wordnet_synsets(pos=("n",)))
    assert nouns == 82115  # WordNet 3.0's noun synsets
    assert lemma_index(pos=("n",))["dog"][0] == "n.02084071"  # dog, domestic dog, Canis familiaris


# ------------------------------------------------------------------------------------------ metrics


def test_filtered_and_raw_ranks_on_a_hand_made_score_matrix():
    test = np.array([(0, 0, 1), (2, 0, 3)])
    known = np.array([(0, 0, 1), (2, 0, 3), (0, 0, 2), (3, 0, 1), (0, 0, 3)])
    table = {
        ("tail", 0): [0.9, 0.5, 0.7, 0.5],  # (0, r, ?): true tail 1; 0 and 2 higher, 3 tied
        ("head", 0): [0.1, 0.2, 0.3, 0.4],  # (?, r, 1): true head 0 lowest
        ("tail", 2): [0.0, 0.0, 0.0, 1.0],  # (2, r, ?): true tail 3 first
        ("head", 2): [0.2, 0.2, 0.2, 0.2],  # (?, r, 3): all tied
    }

    def scores(chunk: torch.Tensor, side: str) -> torch.Tensor:
        return torch.tensor([table[(side, int(h))] for h in chunk[:, 0]])

    raw = filtered_ranks(scores, test, None, 4, batch=1)
    assert raw["tail"].tolist() == [3.5, 1.0]  # 1 + 2 higher + 1 tie / 2
    assert raw["head"].tolist() == [4.0, 2.5]  # ties: (4 + 1) / 2, the mean rank
    filtered = filtered_ranks(scores, test, known, 4, batch=2)
    # tail of (0, r, 1): 2 and 3 are known tails of (0, r) and leave; head of (?, r, 1): 3 leaves;
    # head of (?, r, 3): 0 leaves, 1 and 3 stay tied.
    assert filtered["tail"].tolist() == [2.0, 1.0]
    assert filtered["head"].tolist() == [3.0, 2.0]
    assert mrr(filtered) == pytest.approx((1 / 2 + 1 + 1 / 3 + 1 / 2) / 4)
    assert [hits_at(filtered, k) for k in (1, 2, 3)] == [0.25, 0.75, 1.0]
    assert mrr(raw) == pytest.approx((1 / 3.5 + 1 + 1 / 4 + 1 / 2.5) / 4)


# -------------------------------------------------------------------------------------------- TransE


def test_bernoulli_corruption_probabilities():
    triples = np.array([(0, 0, 1), (0, 0, 2), (0, 0, 3), (4, 1, 5), (6, 1, 5)])
    probs = bernoulli_head_probs(triples, 3)
    # r0: 3 tails per head, 1 head per tail -> 3 / 4; r1: 1 tail per head, 2 heads per tail -> 1 / 3; r2: unused.
    assert probs.tolist() == pytest.approx([0.75, 1 / 3, 0.5])


@pytest.mark.parametrize("norm", [1, 2])
def test_transe_scores_all_candidates_like_single_triples(norm):
    torch.manual_seed(0)
    model = TransE(7, 2, 5, norm=norm)
    assert torch.allclose(model.entity.weight.norm(dim=1), torch.ones(7))
    h, r, t = torch.tensor([0, 3]), torch.tensor([1, 0]), torch.tensor([6, 2])
    every = torch.arange(7)
    tails = torch.stack([model.score(h[i].expand(7), r[i].expand(7), every) for i in range(2)])
    heads = torch.stack([model.score(every, r[i].expand(7), t[i].expand(7)) for i in range(2)])
    assert torch.allclose(model.score_tails(h, r), tails, atol=1e-5)
    assert torch.allclose(model.score_heads(r, t), heads, atol=1e-5)
    e, rel = model.entity.weight, model.relation.weight
    expected = -float((e[0] + rel[1] - e[6]).detach().norm(p=norm))
    assert float(model.score(h[:1], r[:1], t[:1]).detach()) == pytest.approx(expected)


def test_corruption_replaces_one_side_and_keeps_the_relation():
    model = TransE(50, 3, 4)
    positive = torch.tensor([(i % 50, i % 3, (i * 7) % 50) for i in range(400)])
    negative = model.corrupt(positive, torch.Generator().manual_seed(0))
    assert torch.equal(negative[:, 1], positive[:, 1])
    same_head, same_tail = negative[:, 0] == positive[:, 0], negative[:, 2] == positive[:, 2]
    assert bool((same_head | same_tail).all())
    assert 100 < int((~same_head).sum()) < 300 and 100 < int((~same_tail).sum()) < 300  # about half each
    only_tails = model.corrupt(positive, torch.Generator().manual_seed(0), torch.zeros(3))
    assert torch.equal(only_tails[:, 0], positive[:, 0])


def test_transe_learns_translations_that_random_scores_cannot_match(tmp_path):
    kg = split_graph(_triangles(), seed=0, valid_fraction=0.1, test_fraction=0.15)
    result = train_transe(kg, dim=16, epochs=100, lr=0.02, batch_size=16, seed=1, out_dir=tmp_path, progress=False)
    # 60 entities: random scores give MRR ~0.08 and Hits@10 ~0.17 on average.
    assert result["test"]["mrr"] > 0.7
    assert result["test"]["hits@10"] >= 0.9
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert lines[0]["epoch"] == 1 and "loss" in lines[0] and "valid_mrr" in lines[9]
    assert lines[-1]["loss"] < lines[0]["loss"]
    table, entities, meta = load_entity_embeddings(tmp_path)
    assert table.shape == (60, 16) and table.dtype == torch.float32
    assert entities == kg.entities and meta["names"] == kg.names and meta["relations"] == ["r1", "r2", "r3"]
    assert meta["kg"] == "triangles" and meta["dim"] == 16
    assert meta["metrics"]["test"]["mrr"] == pytest.approx(result["test"]["mrr"])
    assert torch.allclose(table, result["model"].entity.weight.detach())
    assert torch.allclose(table.norm(dim=1), torch.ones(60), atol=1e-5)


def test_loading_a_broken_embedding_directory_fails_in_one_line(tmp_path):
    kg = split_graph(_triangles(4), seed=0, valid_fraction=0, test_fraction=0)
    train_transe(kg, dim=4, epochs=1, out_dir=tmp_path, progress=False)
    meta = json.loads((tmp_path / ENTITIES_FILE).read_text())
    meta["entities"] = meta["entities"][:-1]
    (tmp_path / ENTITIES_FILE).write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="12 embedding rows for 11 entities") as info:
        load_entity_embeddings(tmp_path)
    assert "\n" not in str(info.value)
    (tmp_path / ENTITIES_FILE).write_text('{"entities": ')
    with pytest.raises(CheckpointError, match="entities.json is not valid JSON"):
        load_entity_embeddings(tmp_path)
    (tmp_path / ENTITIES_FILE).write_text('{"names": []}')
    with pytest.raises(CheckpointError, match="entities.json has no 'entities' list; make it with `bertzoo kg-embed"):
        load_entity_embeddings(tmp_path)
    (tmp_path / ENTITIES_FILE).unlink()
    with pytest.raises(CheckpointError, match=r"entities.json .*not a kg-embed directory"):
        load_entity_embeddings(tmp_path)


def test_every_reader_of_an_entity_list_refuses_a_broken_one_with_its_own_error(tmp_path):
    """The pretraining collator (a config problem), the linker (a data problem) and the embedding loader (a
    checkpoint problem) read entities.json through one function, each raising its own kind of error."""
    from bertzoo.errors import ConfigError
    from bertzoo.io import read_entities
    from bertzoo.knowledge.linking import entity_lexicon

    (tmp_path / ENTITIES_FILE).write_text('["n.01"]')
    for error in (ConfigError, DataError, CheckpointError):
        with pytest.raises(error, match="has no 'entities' list"):
            read_entities(tmp_path, error)
    with pytest.raises(DataError, match="has no 'entities' list"):
        entity_lexicon(tmp_path)
    (tmp_path / ENTITIES_FILE).write_text('{"entities": ["dog.n.01"]}')
    meta, sha = read_entities(tmp_path)
    assert meta == {"entities": ["dog.n.01"]} and len(sha) == 64


# ---------------------------------------------------------------------------------------------- CLI


def _error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")
    return err[0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--kg", "atlantis"], "unknown knowledge graph 'atlantis'"),
        (["--kg", "nations", "--nouns-only"], "--nouns-only applies to --kg wordnet only"),
        (["--kg", "wordnet", "--wordnet-dir", "/nonexistent"], "apt-get install wordnet-base"),
        (["--kg", "nations", "--lr", "-1"], "must be a number > 0"),
        (["--kg", "nations", "--norm", "3"], "invalid choice"),
    ],
)
def test_kg_embed_errors_are_one_line_and_exit_2(tmp_path, capsys, args, message):
    assert main(["kg-embed", "--out", str(tmp_path / "out"), *args]) == 2
    assert message in _error_line(capsys)
    assert not (tmp_path / "out" / ENTITIES_FILE).exists()


def test_kg_embed_bad_tsv_line(tmp_path, capsys):
    path = tmp_path / "bad.tsv"
    path.write_text("a\tr\tb\nonly two\tfields\n")
    assert main(["kg-embed", "--kg", str(path), "--out", str(tmp_path / "out")]) == 2
    assert "bad.tsv:2: expected head<TAB>relation<TAB>tail" in _error_line(capsys)


def test_kg_embed_writes_a_loadable_directory(tmp_path, capsys):
    kg = _triangles(6)
    path = tmp_path / "kg.tsv"
    path.write_text("".join(f"{kg.entities[h]}\t{kg.relations[r]}\t{kg.entities[t]}\n" for h, r, t in kg.train))
    out = tmp_path / "emb"
    assert main(["kg-embed", "--kg", str(path), "--out", str(out), "--dim", "8", "--epochs", "3", "--seed", "1"]) == 0
    assert "test (filtered): mrr" in capsys.readouterr().out
    table, entities, meta = load_entity_embeddings(out)
    assert table.shape == (18, 8) and sorted(entities) == sorted(kg.entities)
    assert meta["kg"] == str(path) and meta["settings"]["seed"] == 1 and meta["settings"]["norm"] == 2
