"""Entity linking for ERNIE (Tsinghua): which knowledge-graph entity each mention in the shards names.

ERNIE aligns an entity with the first token of its mention. Here a mention is a run of 1 to
`max_words` words of the shard text whose lemma is in the KG's lexicon (WordNet: every lemma of
every synset, each lemma linked to its most frequent sense that the KG holds, as WordNet lists
senses most frequent first); the longest match wins, scanning left to right, so "united states"
links once, as one entity. Words are WordPiece words (a token plus its `##` continuations),
compared lowercased; a plural noun's last word also matches its singular ("-ies" -> "-y", "-es",
"-s"). Single function words, numbers and words of fewer than three letters are never linked alone:
WordNet has nouns such as "a" (vitamin A) and "it" (information technology) that would otherwise
link almost every sentence to a wrong sense. The paper linked named entities with TAGME, which
needs the web; lexicon matching is what works offline, and its senses are the most frequent ones,
not disambiguated (said in docs/knowledge.md).

The result is a per-token sidecar of the shards (`unit_sidecar.ENTITIES`: the entity index at a
mention's first token, -1 elsewhere), computed once from the shard tokens and the `bertzoo
kg-embed` directory, stored beside the shards and reused while both are unchanged.
`EntityDataset` adds each example's `entity_ids`, laid out like its `input_ids`.
"""

from __future__ import annotations

import os
import re
import time
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from bertzoo.data.tokens.shards import ShardedCorpus
from bertzoo.data.tokens.tokenizer import Tokenizer
from bertzoo.data.tokens.unit_flags import vocab_tables
from bertzoo.data.tokens.unit_sidecar import ENTITIES, TokenSidecar, corpus_vocab_sha, load_sidecar, write_sidecar
from bertzoo.errors import DataError
from bertzoo.io import read_entities

__all__ = [
    "NO_ENTITY",
    "EntityDataset",
    "EntityLinker",
    "entity_lexicon",
    "entity_sidecar",
    "link_tokens",
    "link_words",
]

NO_ENTITY = -1
# English function words (and a few frequent verbs) that WordNet also lists as nouns or that start
# multiword lemmas by accident; never linked on their own.
STOPWORDS = frozenset(
    """a about above after again against all also am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further had has
    have having he her here hers herself him himself his how i if in into is it its itself just me more
    most my myself no nor not now of off on once only or other our ours ourselves out over own same she
    should so some such than that the their theirs them themselves then there these they this those
    through to too under until up very was we were what when where which while who whom why will with
    would you your yours yourself yourselves one two three first may made known used became including
    later many several well new""".split()
)
_WORD = re.compile(r"^[a-z][a-z'\-]*$")


def _variants(word: str) -> list[str]:
    """The word and its singular candidates (the plural rules WordNet's morphy applies to nouns)."""
    out = [word]
    if word.endswith("ies") and len(word) > 4:
        out.append(word[:-3] + "y")
    if word.endswith("es") and len(word) > 3:
        out.append(word[:-2])
    if word.endswith("s") and not word.endswith("ss") and len(word) > 3:
        out.append(word[:-1])
    return out


def _linkable(word: str) -> bool:
    return len(word) >= 3 and word not in STOPWORDS and _WORD.match(word) is not None


def link_words(words: Sequence[str], lexicon: Mapping[str, int], max_words: int = 3) -> list[tuple[int, int, int]]:
    """Mentions in `words` (lowercase) as (first word, word count, entity): the longest lexicon match
    at each position, left to right; matches never overlap."""
    found: list[tuple[int, int, int]] = []
    i, n = 0, len(words)
    while i < n:
        hit = None
        for k in range(min(max_words, n - i), 0, -1):
            span = words[i : i + k]
            if k == 1 and not _linkable(span[0]):
                continue
            # Multiword lemmas may hold function words ("new york", "the hague"), not only them.
            if k > 1 and not (all(_WORD.match(w) for w in span) and any(w not in STOPWORDS for w in span)):
                continue
            head = "_".join(span[:-1])
            for last in _variants(span[-1]):
                entity = lexicon.get(f"{head}_{last}" if head else last)
                if entity is not None:
                    hit = (i, k, entity)
                    break
            if hit:
                break
        if hit:
            found.append(hit)
            i += hit[1]
        else:
            i += 1
    return found


def link_tokens(
    ids: np.ndarray, vocab: Sequence[str], continuation: np.ndarray, lexicon: Mapping[str, int], max_words: int = 3
) -> np.ndarray:
    """Per-token entity ids of a token array: the entity at the first token of each mention, -1 elsewhere."""
    ids = np.asarray(ids, dtype=np.int64)
    out = np.full(len(ids), NO_ENTITY, dtype=np.int32)
    if not len(ids):
        return out
    starts = np.flatnonzero(~np.asarray(continuation, dtype=bool)[ids])
    if not len(starts) or starts[0] != 0:
        starts = np.concatenate([[0], starts])  # a leading continuation belongs to a word of its own
    bounds = np.append(starts, len(ids))
    pieces = [vocab[t].removeprefix("##").lower() for t in ids.tolist()]
    words = ["".join(pieces[s:e]) for s, e in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True)]
    for first, _, entity in link_words(words, lexicon, max_words):
        out[starts[first]] = entity
    return out


def entity_lexicon(
    entities: str | os.PathLike | Mapping[str, Any], wordnet: str | os.PathLike | None = None
) -> dict[str, int]:
    """Lemma (lowercase, words joined by "_") -> entity index, for a `bertzoo kg-embed` directory or its
    `entities.json` object (as an ERNIE-THU model keeps it: `ErnieThu.entity_list`).

    WordNet graphs: every lemma of WordNet's index (`wordnet`: its directory, default Debian's) linked to its
    first (most frequent) sense among the graph's entities; DataError when the list names ids that are not
    WordNet synsets. Other graphs: each entity's name."""
    meta = entities if isinstance(entities, Mapping) else read_entities(entities)[0]
    index = {str(e): i for i, e in enumerate(meta["entities"])}
    lexicon: dict[str, int] = {}
    if str(meta.get("kg", "")).startswith("wordnet"):
        from bertzoo.knowledge.graphs import WORDNET_DIR, lemma_index

        lemmas = lemma_index(wordnet or WORDNET_DIR)
        known = {s for synsets in lemmas.values() for s in synsets}
        unknown = [e for e in index if e not in known]
        if unknown:
            raise DataError(
                f"{len(unknown)} of the {len(index)} entities in the entity list are not synsets of this WordNet "
                f"(e.g. {unknown[0]!r}); make the list again with `bertzoo kg-embed --kg wordnet`"
            )
        for lemma, synsets in lemmas.items():
            entity = next((index[s] for s in synsets if s in index), None)
            if entity is not None:
                lexicon[lemma.lower()] = entity
        return lexicon
    names = meta.get("names") or meta["entities"]
    for i, name in enumerate(names):
        lexicon.setdefault(re.sub(r"\s+", "_", str(name).strip().lower()), i)
    return lexicon


def entity_sidecar(
    corpus: ShardedCorpus | str | os.PathLike, entities_dir: str | os.PathLike, *, max_words: int = 3
) -> TokenSidecar:
    """The entity links of a shard directory for the KG in `entities_dir`: the stored sidecar when it
    was made from the same entities file, else linked now (and stored beside the shards)."""
    if not isinstance(corpus, ShardedCorpus):
        corpus = ShardedCorpus(corpus)
    _, sha = read_entities(entities_dir)
    stored = load_sidecar(corpus, ENTITIES)
    if stored is not None and stored.meta.get("entities_sha256") == sha and stored.meta.get("max_words") == max_words:
        return stored
    start = time.perf_counter()
    tokenizer = Tokenizer.load(corpus.path / "tokenizer")
    vocab = tokenizer.vocab_list()
    continuation, _ = vocab_tables(tokenizer)
    lexicon = entity_lexicon(entities_dir)
    arrays, base = [], 0
    for shard in corpus.meta["shards"]:
        n = int(shard["num_tokens"])
        arrays.append(link_tokens(corpus.token_range(base, base + n), vocab, continuation, lexicon, max_words))
        base += n
    linked = np.concatenate(arrays) if arrays else np.zeros(0, np.int32)
    meta = {
        "entities_dir": str(entities_dir),
        "entities_sha256": sha,
        "max_words": max_words,
        "num_tokens": corpus.num_tokens,
        "vocab_sha256": corpus_vocab_sha(corpus),
        "lexicon_size": len(lexicon),
        "mentions": int((linked >= 0).sum()),
        "distinct_entities": int(len(np.unique(linked[linked >= 0]))),
        "seconds": round(time.perf_counter() - start, 2),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    try:
        write_sidecar(corpus, arrays, meta, ENTITIES)
    except OSError as exc:
        warnings.warn(f"cannot store entity links in {corpus.path} ({exc}); keeping them in memory", stacklevel=2)
    return TokenSidecar(arrays, meta)


class EntityLinker:
    """Entity links of batches already made (fine-tuning): `linker(input_ids)` -> entity_ids of the same
    shape, each row linked on its own. `entities`: a kg-embed directory or its entities.json object. Special
    and padding tokens are not words, so they never link."""

    def __init__(
        self, tokenizer: Tokenizer, entities: str | os.PathLike | Mapping[str, Any], max_words: int = 3
    ) -> None:
        self.vocab = tokenizer.vocab_list()
        self.continuation, _ = vocab_tables(tokenizer)
        self.lexicon = entity_lexicon(entities)
        self.max_words = max_words

    def __call__(self, input_ids: torch.Tensor) -> torch.Tensor:
        ids = input_ids.reshape(-1, input_ids.shape[-1]).cpu().numpy()
        rows = [link_tokens(row, self.vocab, self.continuation, self.lexicon, self.max_words) for row in ids]
        out = np.stack(rows).astype(np.int64) if rows else np.zeros(ids.shape, np.int64)
        return torch.from_numpy(out).reshape(input_ids.shape)


class EntityDataset:
    """Pretraining examples (`NspDataset` and kin, which carry a `plan`) plus their `entity_ids`:
    the entity index at each mention's first token, -1 elsewhere and at the special tokens."""

    def __init__(self, inner: Any, links: TokenSidecar) -> None:
        if getattr(inner, "plan", None) is None:
            raise DataError("entity links need examples built from shard token ranges (an NspDataset)")
        self.inner = inner
        self.links = links

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, i: int) -> dict[str, Any]:
        example = self.inner[i]
        n = len(example["input_ids"])
        example["entity_ids"] = self.inner.plan.layout(int(example["index"]), n, self.links.range, NO_ENTITY, np.int64)
        return example

    def __getattr__(self, name: str) -> Any:
        # Everything else (plan, set_epoch, epoch_examples, ...) is the wrapped dataset's.
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)
