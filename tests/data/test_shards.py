"""Shard preparation: round trip, streaming into several shards, atomicity, and the reader."""

from __future__ import annotations

import json
import os
import pickle

import numpy as np
import pytest

from bertzoo.data.text.corpus import split_sentences
from bertzoo.data.tokens.shards import ShardedCorpus, is_shard_dir, prepare_shards, token_dtype
from bertzoo.data.tokens.train_tokenizer import train_wordpiece
from bertzoo.errors import ConfigError, DataError


def _expected(docs, tok):
    """Per document, the token lists of its non-empty sentences, encoded one sentence at a time."""
    out = []
    for doc in docs:
        sents = [tok.encode_batch([s])[0] for s in split_sentences(doc)]
        sents = [s for s in sents if s]
        if sents:
            out.append(sents)
    return out


def test_round_trip_equals_direct_encoding(synthetic_docs, synthetic_tokenizer, synthetic_shards):
    corpus = ShardedCorpus(synthetic_shards)
    expected = _expected(synthetic_docs, synthetic_tokenizer)
    assert corpus.num_docs == len(expected) == len(synthetic_docs)
    assert corpus.num_sentences == sum(len(d) for d in expected)
    assert corpus.num_tokens == sum(len(s) for d in expected for s in d)
    assert corpus.vocab_size == synthetic_tokenizer.vocab_size
    for d in range(0, corpus.num_docs, 7):
        first, last = corpus.doc_sentences(d)
        assert last - first == len(expected[d])
        for k, s in enumerate(range(first, last)):
            assert corpus.sentence(s).tolist() == expected[d][k]
            assert corpus.sentence_lengths[s] == len(expected[d][k])
        assert corpus.tokens(first, last).tolist() == [t for s in expected[d] for t in s]


def test_several_shards_counts_add_up(synthetic_shards):
    meta = json.loads((synthetic_shards / "meta.json").read_text())
    shards = meta["shards"]
    assert len(shards) == meta["num_shards"] > 3
    for key in ("num_tokens", "num_sentences", "num_docs"):
        assert sum(s[key] for s in shards) == meta[key]
    # Every shard but the last is closed by the document that brings it to shard_tokens.
    assert all(s["num_tokens"] >= 50_000 for s in shards[:-1])
    corpus = ShardedCorpus(synthetic_shards)
    for s in shards:
        tokens = np.load(synthetic_shards / f"{s['name']}.tokens.npy", mmap_mode="r", allow_pickle=False)
        sents = np.load(synthetic_shards / f"{s['name']}.sentences.npy", mmap_mode="r", allow_pickle=False)
        docs = np.load(synthetic_shards / f"{s['name']}.documents.npy", mmap_mode="r", allow_pickle=False)
        assert isinstance(tokens, np.memmap) and tokens.dtype == np.uint16 and len(tokens) == s["num_tokens"]
        assert sents.dtype == docs.dtype == np.int64
        assert sents[0] == 0 and sents[-1] == len(tokens) and np.all(np.diff(sents) > 0)
        assert docs[0] == 0 and docs[-1] == len(sents) - 1 and np.all(np.diff(docs) > 0)
        # Shards written with a rewritten header stay readable by numpy's own loader.
        assert int(np.asarray(tokens).max()) < corpus.vocab_size


def test_flushes_shards_while_streaming(tmp_path, synthetic_docs, synthetic_tokenizer):
    out = tmp_path / "out"
    tmp = tmp_path / f"out.tmp-{os.getpid()}"
    seen_on_disk = []

    def docs():
        for i, doc in enumerate(synthetic_docs * 2):
            if i == 2000:
                # Midway, earlier shards are complete on disk and nothing is in the final place yet.
                seen_on_disk.extend(sorted(p.name for p in tmp.glob("shard_*.sentences.npy")))
                assert not out.exists()
            yield doc

    info = prepare_shards(docs(), synthetic_tokenizer, out, shard_tokens=20_000, batch_docs=64, progress=False)
    assert len(seen_on_disk) >= 10
    assert info.num_shards > len(seen_on_disk)
    assert info.num_docs == 2 * len(synthetic_docs)
    assert not tmp.exists()


def _fail_after(docs, n, exc):
    for i, doc in enumerate(docs):
        if i == n:
            raise exc
        yield doc


@pytest.mark.parametrize("exc", [RuntimeError("disk on fire"), KeyboardInterrupt()])
def test_failure_leaves_nothing_behind(tmp_path, synthetic_docs, synthetic_tokenizer, exc):
    out = tmp_path / "out"
    with pytest.raises(type(exc)):
        prepare_shards(
            _fail_after(synthetic_docs, 700, exc),
            synthetic_tokenizer,
            out,
            shard_tokens=10_000,
            progress=False,
        )
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_failed_overwrite_keeps_previous_output(tmp_path, synthetic_docs, synthetic_tokenizer):
    out = tmp_path / "out"
    prepare_shards(synthetic_docs[:100], synthetic_tokenizer, out, progress=False)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    with pytest.raises(RuntimeError):
        prepare_shards(
            _fail_after(synthetic_docs, 500, RuntimeError("boom")),
            synthetic_tokenizer,
            out,
            overwrite=True,
            shard_tokens=5_000,
            progress=False,
        )
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_overwrite_rules(tmp_path, synthetic_docs, synthetic_tokenizer):
    out = tmp_path / "out"
    prepare_shards(synthetic_docs[:50], synthetic_tokenizer, out, progress=False)
    with pytest.raises(DataError, match="already holds prepared shards; pass --overwrite"):
        prepare_shards(synthetic_docs[:60], synthetic_tokenizer, out, progress=False)
    info = prepare_shards(synthetic_docs[:60], synthetic_tokenizer, out, overwrite=True, progress=False)
    assert info.num_docs == ShardedCorpus(out).num_docs == 60
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # the old copy is gone
    user_dir = tmp_path / "mine"
    user_dir.mkdir()
    (user_dir / "notes.txt").write_text("precious", encoding="utf-8")
    with pytest.raises(DataError, match="not empty"):
        prepare_shards(synthetic_docs[:5], synthetic_tokenizer, user_dir, progress=False)
    with pytest.raises(DataError, match="refusing to overwrite"):
        prepare_shards(synthetic_docs[:5], synthetic_tokenizer, user_dir, overwrite=True, progress=False)
    assert (user_dir / "notes.txt").read_text(encoding="utf-8") == "precious"
    with pytest.raises(ConfigError):
        prepare_shards(synthetic_docs[:5], synthetic_tokenizer, tmp_path / "x", shard_tokens=0, progress=False)


def test_incomplete_directory_is_not_prepared(tmp_path, synthetic_shards):
    broken = tmp_path / "broken"
    broken.mkdir()
    for p in synthetic_shards.glob("shard_00000.*"):
        (broken / p.name).write_bytes(p.read_bytes())
    assert not is_shard_dir(broken) and is_shard_dir(synthetic_shards)
    with pytest.raises(DataError, match=r"is not a complete shard directory \(no meta.json\); re-run bertzoo prepare"):
        ShardedCorpus(broken)
    with pytest.raises(DataError, match="shard directory not found"):
        ShardedCorpus(tmp_path / "nowhere")


def test_empty_sentences_and_documents_are_dropped(tmp_path, synthetic_tokenizer):
    docs = ["Abc def.", "\u200b", "Abc. \u200b. Def."]  # zero-width space tokenizes to nothing
    info = prepare_shards(docs, synthetic_tokenizer, tmp_path / "o", progress=False)
    corpus = ShardedCorpus(tmp_path / "o")
    assert info.docs_skipped == 1 and corpus.num_docs == 2
    assert all(corpus.sentence_lengths > 0)
    with pytest.raises(DataError, match="produced any token"):
        prepare_shards(["\u200b"], synthetic_tokenizer, tmp_path / "none", progress=False)
    assert not (tmp_path / "none").exists()


def test_check_tokenizer(synthetic_shards, synthetic_tokenizer, synthetic_docs):
    corpus = ShardedCorpus(synthetic_shards)
    corpus.check_tokenizer(synthetic_tokenizer)
    corpus.check_tokenizer(corpus.tokenizer())
    other = train_wordpiece(synthetic_docs[:200], 700)
    with pytest.raises(DataError, match="differs from the one .* was prepared with"):
        corpus.check_tokenizer(other)


def test_reader_pickles_without_copying_tokens(synthetic_shards):
    corpus = ShardedCorpus(synthetic_shards)
    blob = pickle.dumps(corpus)
    assert len(blob) < 1000 < corpus.num_tokens
    clone = pickle.loads(blob)
    assert clone.tokens(0, 10).tolist() == corpus.tokens(0, 10).tolist()


def test_token_range_across_shards(synthetic_shards):
    corpus = ShardedCorpus(synthetic_shards)
    assert corpus.num_shards > 1
    everything = np.concatenate([corpus.sentence(s) for s in range(corpus.num_sentences)])
    boundary = json.loads((synthetic_shards / "meta.json").read_text())["shards"][0]["num_tokens"]
    got = corpus.token_range(boundary - 5, boundary + 5)
    assert got.tolist() == everything[boundary - 5 : boundary + 5].tolist()
    assert corpus.tokens(0, corpus.num_sentences).tolist() == everything.tolist()
    assert len(corpus.token_range(corpus.num_tokens, corpus.num_tokens)) == 0
    assert len(corpus.tokens(corpus.num_sentences, corpus.num_sentences)) == 0
    with pytest.raises(IndexError):
        corpus.token_range(-1, 3)
    with pytest.raises(IndexError):
        corpus.token_range(0, corpus.num_tokens + 1)


def test_token_dtype():
    assert token_dtype(30000) == np.uint16
    assert token_dtype(65535) == np.uint16
    assert token_dtype(65536) == np.uint32


def test_prepare_builtin_wiki(wiki_docs, wiki_tokenizer, wiki_shards):
    corpus = ShardedCorpus(wiki_shards)
    assert corpus.num_docs == len(wiki_docs)
    assert corpus.num_sentences > 3 * corpus.num_docs
    assert corpus.meta["source"] == "builtin:wiki-en"
    corpus.check_tokenizer(wiki_tokenizer)
    for d in (0, len(wiki_docs) // 2, len(wiki_docs) - 1):
        expected = [t for ids in wiki_tokenizer.encode_batch(split_sentences(wiki_docs[d])) for t in ids]
        assert corpus.tokens(*corpus.doc_sentences(d)).tolist() == expected


def test_unknown_tokens_are_counted(tmp_path, synthetic_tokenizer):
    # Three CJK characters the English vocabulary has never seen: BERT's pre-tokenizer makes each a word, each [UNK].
    info = prepare_shards(["Abc def.", "Abc 中文字 def."], synthetic_tokenizer, tmp_path / "o", progress=False)
    assert info.num_unk == 3
    assert json.loads((tmp_path / "o" / "meta.json").read_text())["num_unk"] == 3
