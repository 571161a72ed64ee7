"""Knowledge graphs for ERNIE (Tsinghua) knowledge fusion and TransE: reading them, splitting them, and the
entity-embedding directory `bertzoo kg-embed` writes (`entity_embeddings.safetensors` + `entities.json`).

Sources (`load_kg`):

- **WordNet 3.0** from Debian's `wordnet-base` package (`/usr/share/wordnet/data.noun`, `index.noun`, ...;
  `apt-get install wordnet-base`, which `make setup` does where apt runs as root). Entities are synsets, named
  `n.02084071` (part of speech of the data file, `a` for adjectives and their satellites, and the 8-digit byte
  offset), with the first lemma as the human-readable name. Relations are WN18RR's 11 (Dettmers et al. 2018:
  WN18 without the relations whose inverse is also in the graph), each one WordNet pointer, followed from
  the synset whose line holds it:

  ==================================  =======  ==================================================
  WN18RR relation                     pointer  e.g.
  ==================================  =======  ==================================================
  ``_hypernym``                       ``@``    dog -> canine
  ``_instance_hypernym``              ``@i``   Paris -> national capital
  ``_member_meronym``                 ``%m``   Alcidae -> Pinguinus (the group -> its member)
  ``_has_part``                       ``%p``   the whole -> its part
  ``_synset_domain_topic_of``         ``;c``   militia -> military (synset -> its topic)
  ``_member_of_domain_region``        ``-r``   the region -> a synset of that region
  ``_member_of_domain_usage``         ``-u``   the usage (slang, ...) -> a synset of that usage
  ``_derivationally_related_form``    ``+``    (a lexical pointer between words; kept per synset)
  ``_also_see``                       ``^``    (verbs, adjectives)
  ``_verb_group``                     ``$``    (verbs)
  ``_similar_to``                     ``&``    (adjectives)
  ==================================  =======  ==================================================

  WN18RR itself is a 40,943-synset subset with its own split; ours is the whole of WordNet 3.0 (or its 82,115
  noun synsets with `pos=("n",)`, where the last three relations have no triple) with a seeded split, so its
  figures are not WN18RR's (docs/knowledge.md). `lemma_index` maps each lemma to its synsets in WordNet's sense
  order, most frequent first: the entity linker (`knowledge/linking.py`) reads it.
- **Nations, Kinships, UMLS**: the small benchmark graphs inside the `pykeen` wheel, read in place with their
  official train/valid/test splits. Only the data files are used: `pip install --no-deps pykeen` (as
  `make setup` does) is enough, pykeen itself is never imported.
- **A TSV file**: `head<TAB>relation<TAB>tail` per line, split with a seed.

Seeded splits hold out valid and test triples whose head, tail and relation all stay in the training triples
(a triple that would take the last training occurrence of one of them stays in train), so every evaluated
entity and relation has been trained. Duplicate triples are kept once.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from bertzoo.errors import CheckpointError, DataError
from bertzoo.io import ENTITIES_FILE, read_entities, write_json, write_safetensors

WORDNET_DIR = Path("/usr/share/wordnet")
WORDNET_INSTALL = "apt-get install wordnet-base"
PYKEEN_INSTALL = "pip install --no-deps pykeen"
PYKEEN_DATASETS = ("nations", "kinships", "umls")
POS_FILES = {"n": "noun", "v": "verb", "a": "adj", "r": "adv"}

# WN18RR's relations, by the WordNet pointer symbol each one follows (see the module docstring).
WN18RR_POINTERS: dict[str, str] = {
    "@": "_hypernym",
    "@i": "_instance_hypernym",
    "%m": "_member_meronym",
    "%p": "_has_part",
    ";c": "_synset_domain_topic_of",
    "-r": "_member_of_domain_region",
    "-u": "_member_of_domain_usage",
    "+": "_derivationally_related_form",
    "^": "_also_see",
    "$": "_verb_group",
    "&": "_similar_to",
}
WN18RR_RELATIONS = tuple(WN18RR_POINTERS.values())

EMBEDDINGS_FILE = "entity_embeddings.safetensors"
ENTITY_TENSOR = "entity_embeddings"
RELATION_TENSOR = "relation_embeddings"


class WordNetMissingError(DataError):
    """The WordNet data files are not installed."""


class PykeenMissingError(DataError):
    """The `pykeen` package (whose data files hold Nations, Kinships and UMLS) is not installed."""


@dataclass
class KnowledgeGraph:
    """Entities and relations (ids), each entity's readable name, and (head, relation, tail) index triples."""

    entities: list[str]
    relations: list[str]
    names: list[str]
    train: np.ndarray  # (N, 3) int64: head, relation, tail
    valid: np.ndarray
    test: np.ndarray
    source: str  # "wordnet", "wordnet-nouns", "nations", ..., or the TSV path
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def num_entities(self) -> int:
        return len(self.entities)

    @property
    def num_relations(self) -> int:
        return len(self.relations)

    def all_triples(self) -> np.ndarray:
        """Train, valid and test together: the known triples that filtered ranking leaves out."""
        return np.concatenate([self.train, self.valid, self.test])

    def summary(self) -> str:
        return (
            f"{self.source}: {self.num_entities} entities, {self.num_relations} relations, "
            f"{len(self.train)}/{len(self.valid)}/{len(self.test)} train/valid/test triples"
        )


# ------------------------------------------------------------------------------------------- WordNet


@dataclass
class Synset:
    """One line of a WordNet data.* file."""

    id: str  # "n.02084071"
    lemmas: list[str]
    pointers: list[tuple[str, str]]  # (pointer symbol, target synset id)


def _wordnet_file(directory: Path, name: str) -> Path:
    path = directory / name
    if not path.is_file():
        raise WordNetMissingError(
            f"WordNet file {path} not found; install WordNet 3.0 with `{WORDNET_INSTALL}` (Debian/Ubuntu, as root)"
        )
    return path


def _file_pos(pos: str) -> str:
    """The data file a pointer's part of speech lives in: adjective satellites (s) are in data.adj."""
    return "a" if pos == "s" else pos


def parse_data_line(line: str, pos: str) -> Synset | None:
    """Parse one line of data.{noun,verb,adj,adv}: `offset lex_filenum ss_type w_cnt(hex) [word lex_id]...
    p_cnt [symbol offset pos source/target]... [frames] | gloss`. None for the license header lines."""
    if not line.strip() or line.startswith(" "):
        return None
    fields = line.split(" | ", 1)[0].split()
    try:
        offset = fields[0]
        w_cnt = int(fields[3], 16)
        words = fields[4 : 4 + 2 * w_cnt : 2]
        at = 4 + 2 * w_cnt
        p_cnt = int(fields[at])
        pointers = []
        for i in range(p_cnt):
            symbol, target, target_pos = fields[at + 1 + 4 * i : at + 4 + 4 * i]
            pointers.append((symbol, f"{_file_pos(target_pos)}.{target}"))
    except (IndexError, ValueError):
        raise DataError(f"not a WordNet data line ({line[:60]!r}...); is this a WordNet 3.0 data.{pos} file?") from None
    # Adjectives may carry a syntactic marker: "galore(ip)".
    lemmas = [re.sub(r"\((a|p|ip)\)$", "", w) for w in words]
    return Synset(f"{pos}.{offset}", lemmas, pointers)


def read_wordnet_synsets(directory: str | os.PathLike = WORDNET_DIR, pos: Sequence[str] = ("n",)) -> Iterator[Synset]:
    """Every synset of the data files of `pos` (n, v, a, r), in file order."""
    directory = Path(directory)
    for p in pos:
        if p not in POS_FILES:
            raise DataError(f"unknown WordNet part of speech {p!r}; use some of {', '.join(POS_FILES)}")
        with open(_wordnet_file(directory, f"data.{POS_FILES[p]}"), encoding="utf-8", errors="replace") as f:
            for line in f:
                synset = parse_data_line(line, p)
                if synset is not None:
                    yield synset


def wordnet_triples(
    synsets: Iterable[Synset], relations: dict[str, str] | None = None
) -> tuple[list[str], list[str], list[str], list[tuple[str, str, str]]]:
    """(entity ids, names, relation names, unique (head id, relation, tail id) triples between the given
    synsets), following the pointers in `relations` (symbol -> name; WN18RR's by default)."""
    relations = WN18RR_POINTERS if relations is None else relations
    synsets = list(synsets)
    known = {s.id for s in synsets}
    seen: set[tuple[str, str, str]] = set()
    triples = []
    for s in synsets:
        for symbol, target in s.pointers:
            name = relations.get(symbol)
            if name is None or target not in known:
                continue
            triple = (s.id, name, target)
            if triple not in seen:
                seen.add(triple)
                triples.append(triple)
    used = {r for _, r, _ in triples}
    return (
        [s.id for s in synsets],
        [s.lemmas[0].replace("_", " ") if s.lemmas else s.id for s in synsets],
        [r for r in dict.fromkeys(relations.values()) if r in used],
        triples,
    )


def lemma_index(
    directory: str | os.PathLike = WORDNET_DIR, pos: Sequence[str] = ("n", "v", "a", "r")
) -> dict[str, list[str]]:
    """Lemma (lowercase, words joined by "_") -> its synset ids in WordNet's sense order (index.* lists the
    most frequent sense first), parts of speech in the order of `pos`."""
    directory = Path(directory)
    out: dict[str, list[str]] = {}
    for p in pos:
        with open(_wordnet_file(directory, f"index.{POS_FILES[p]}"), encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith(" ") or not line.strip():
                    continue
                # lemma pos synset_cnt p_cnt [ptr_symbol...] sense_cnt tagsense_cnt synset_offset...
                fields = line.split()
                count = int(fields[2])
                offsets = fields[len(fields) - count :]
                out.setdefault(fields[0].lower(), []).extend(f"{p}.{o}" for o in offsets)
    return out


def read_wordnet(
    directory: str | os.PathLike = WORDNET_DIR,
    *,
    pos: Sequence[str] = ("n", "v", "a", "r"),
    seed: int = 0,
    valid_fraction: float = 0.03,
    test_fraction: float = 0.03,
) -> KnowledgeGraph:
    """WordNet 3.0 as a graph of WN18RR's relations between the synsets of `pos`, split with `seed`."""
    entities, names, relations, triples = wordnet_triples(read_wordnet_synsets(directory, pos))
    source = "wordnet-nouns" if tuple(pos) == ("n",) else "wordnet"
    kg = _from_triples(triples, source, entities=entities, names=names, relations=relations)
    return split_graph(kg, seed=seed, valid_fraction=valid_fraction, test_fraction=test_fraction)


# --------------------------------------------------------------------------------- other sources


def _index(triples: Sequence[tuple[str, str, str]], entities: list[str], relations: list[str]) -> np.ndarray:
    e = {x: i for i, x in enumerate(entities)}
    r = {x: i for i, x in enumerate(relations)}
    out = np.array([(e[h], r[rel], e[t]) for h, rel, t in triples], dtype=np.int64)
    return out.reshape(-1, 3)


def _from_triples(
    triples: Sequence[tuple[str, str, str]],
    source: str,
    *,
    entities: list[str] | None = None,
    names: list[str] | None = None,
    relations: list[str] | None = None,
) -> KnowledgeGraph:
    """An unsplit graph (everything in train); entities and relations in first-seen order unless given."""
    triples = list(dict.fromkeys(triples))
    if entities is None:
        entities = list(dict.fromkeys(x for h, _, t in triples for x in (h, t)))
    if relations is None:
        relations = list(dict.fromkeys(r for _, r, _ in triples))
    empty = np.zeros((0, 3), np.int64)
    return KnowledgeGraph(
        entities, relations, names or list(entities), _index(triples, entities, relations), empty, empty, source
    )


def split_graph(
    kg: KnowledgeGraph, *, seed: int = 0, valid_fraction: float = 0.03, test_fraction: float = 0.03
) -> KnowledgeGraph:
    """Hold out about `valid_fraction` and `test_fraction` of `kg.train` (a seeded permutation), taking only
    triples whose head, tail and relation keep at least one training triple."""
    if not (0 <= valid_fraction < 1 and 0 <= test_fraction < 1 and valid_fraction + test_fraction < 1):
        raise DataError(
            f"valid and test fractions must be in [0, 1) and sum below 1, got {valid_fraction}, {test_fraction}"
        )
    triples = kg.train
    n = len(triples)
    want = [int(round(valid_fraction * n)), int(round(test_fraction * n))]
    order = np.random.default_rng(seed).permutation(n)
    entity_count = np.bincount(triples[:, [0, 2]].ravel(), minlength=kg.num_entities)
    relation_count = np.bincount(triples[:, 1], minlength=kg.num_relations)
    held: list[list[int]] = [[], []]
    side = 0
    for i in order.tolist():
        while side < 2 and len(held[side]) >= want[side]:
            side += 1
        if side == 2:
            break
        h, r, t = triples[i].tolist()
        # A self-loop counts twice in entity_count (once per end): it may go only if the entity has another triple.
        keep = 2 if h == t else 1
        if relation_count[r] <= 1 or entity_count[h] <= keep or entity_count[t] <= keep:
            continue
        entity_count[h] -= 1
        entity_count[t] -= 1
        relation_count[r] -= 1
        held[side].append(i)
    out = np.ones(n, bool)
    out[held[0] + held[1]] = False
    return KnowledgeGraph(
        kg.entities,
        kg.relations,
        kg.names,
        triples[np.sort(np.flatnonzero(out))],
        triples[np.sort(np.asarray(held[0], np.int64))],
        triples[np.sort(np.asarray(held[1], np.int64))],
        kg.source,
        {**kg.info, "split_seed": seed, "valid_fraction": valid_fraction, "test_fraction": test_fraction},
    )


def _read_tsv(path: Path) -> list[tuple[str, str, str]]:
    triples = []
    try:
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                parts = line.rstrip("\n").rstrip("\r").split("\t")
                if len(parts) != 3 or not all(p.strip() for p in parts):
                    raise DataError(f"{path}:{number}: expected head<TAB>relation<TAB>tail, got {line.strip()[:80]!r}")
                triples.append(tuple(p.strip() for p in parts))
    except UnicodeDecodeError as exc:
        raise DataError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if not triples:
        raise DataError(f"{path} holds no triples; expected head<TAB>relation<TAB>tail lines")
    return triples


def read_tsv(
    path: str | os.PathLike, *, seed: int = 0, valid_fraction: float = 0.05, test_fraction: float = 0.05
) -> KnowledgeGraph:
    """A user's `head<TAB>relation<TAB>tail` file, split with `seed` (entity names are the ids)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"knowledge graph file not found: {path}")
    kg = _from_triples(_read_tsv(path), str(path))
    return split_graph(kg, seed=seed, valid_fraction=valid_fraction, test_fraction=test_fraction)


def pykeen_dataset_dir(name: str) -> Path:
    """Where the installed pykeen wheel keeps dataset `name` (found without importing pykeen)."""
    spec = importlib.util.find_spec("pykeen")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        directory = Path(location) / "datasets" / name
        if (directory / "train.txt").is_file():
            return directory
    raise PykeenMissingError(
        f"the {name} knowledge graph comes with the pykeen package, which is not installed here; "
        f"install its data files with `{PYKEEN_INSTALL}`"
    )


def read_pykeen(name: str) -> KnowledgeGraph:
    """Nations, Kinships or UMLS with their official train/valid/test split (entities sorted by name)."""
    if name not in PYKEEN_DATASETS:
        raise DataError(f"unknown packaged knowledge graph {name!r}; use one of {', '.join(PYKEEN_DATASETS)}")
    directory = pykeen_dataset_dir(name)
    splits = {s: _read_tsv(directory / f"{s}.txt") for s in ("train", "valid", "test")}
    every = [x for triples in splits.values() for x in triples]
    entities = sorted({x for h, _, t in every for x in (h, t)})
    relations = sorted({r for _, r, _ in every})
    arrays = {s: _index(list(dict.fromkeys(t)), entities, relations) for s, t in splits.items()}
    return KnowledgeGraph(
        entities, relations, list(entities), arrays["train"], arrays["valid"], arrays["test"], name,
        {"files": str(directory)},
    )  # fmt: skip


def load_kg(
    spec: str,
    *,
    nouns_only: bool = False,
    seed: int = 0,
    wordnet_dir: str | os.PathLike = WORDNET_DIR,
) -> KnowledgeGraph:
    """`wordnet`, `nations`, `kinships`, `umls` or the path of a TSV file."""
    key = spec.strip().lower()
    if key == "wordnet":
        return read_wordnet(wordnet_dir, pos=("n",) if nouns_only else ("n", "v", "a", "r"), seed=seed)
    if nouns_only:
        raise DataError("--nouns-only applies to --kg wordnet only")
    if key in PYKEEN_DATASETS:
        return read_pykeen(key)
    path = Path(spec)
    if path.is_file():
        return read_tsv(path, seed=seed)
    raise DataError(
        f"unknown knowledge graph {spec!r}: use wordnet, {', '.join(PYKEEN_DATASETS)} or the path of a "
        "head<TAB>relation<TAB>tail file"
    )


# ------------------------------------------------------------------------------- embedding directory


def save_entity_embeddings(
    directory: str | os.PathLike,
    kg: KnowledgeGraph,
    entity_embeddings: torch.Tensor,
    relation_embeddings: torch.Tensor,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Write `entity_embeddings.safetensors` (entity and relation tables, float32) and `entities.json`
    (ids, names, relations, source, dim, and `extra`: metrics, settings), each file atomically."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    entity = entity_embeddings.detach().to("cpu", torch.float32).contiguous()
    relation = relation_embeddings.detach().to("cpu", torch.float32).contiguous()
    if entity.shape[0] != kg.num_entities or relation.shape[0] != kg.num_relations:
        raise CheckpointError(
            f"embedding tables {tuple(entity.shape)} / {tuple(relation.shape)} do not match the graph's "
            f"{kg.num_entities} entities / {kg.num_relations} relations"
        )
    write_safetensors({ENTITY_TENSOR: entity, RELATION_TENSOR: relation}, directory / EMBEDDINGS_FILE)
    meta = {
        "entities": kg.entities,
        "names": kg.names,
        "relations": kg.relations,
        "kg": kg.source,
        "dim": int(entity.shape[1]),
        **(extra or {}),
    }
    write_json(directory / ENTITIES_FILE, meta)
    return directory


def load_entity_embeddings(directory: str | os.PathLike) -> tuple[torch.Tensor, list[str], dict[str, Any]]:
    """(entity table (E, dim) float32, entity ids, the whole entities.json as read) of a `bertzoo kg-embed`
    directory (the relation table stays in the safetensors file, under RELATION_TENSOR). One CheckpointError
    when a file is missing or damaged or the shapes disagree."""
    directory = Path(directory)
    hint = f"make it with `bertzoo kg-embed --kg wordnet --out {directory}`"
    weights = directory / EMBEDDINGS_FILE
    if not weights.is_file():
        raise CheckpointError(f"{weights} not found: not a kg-embed directory; {hint}")
    meta, _ = read_entities(directory, CheckpointError)
    try:
        tensors = load_file(weights)
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise CheckpointError(f"{weights} is not a readable safetensors file ({exc}); {hint}") from None
    entities = meta["entities"]
    table = tensors.get(ENTITY_TENSOR)
    problems = []
    if table is None or table.dim() != 2:
        problems.append(f"no 2-D tensor {ENTITY_TENSOR!r}")
    else:
        if table.shape[0] != len(entities):
            problems.append(f"{table.shape[0]} embedding rows for {len(entities)} entities")
        if meta.get("dim") is not None and table.shape[1] != meta["dim"]:
            problems.append(f"width {table.shape[1]}, entities.json says dim {meta['dim']}")
    names = meta.get("names")
    if names is not None and (not isinstance(names, list) or len(names) != len(entities)):
        problems.append(f"{len(names) if isinstance(names, list) else 'no list of'} names for {len(entities)} entities")
    relation = tensors.get(RELATION_TENSOR)
    relations = meta.get("relations")
    if relation is not None and isinstance(relations, list) and relation.shape[0] != len(relations):
        problems.append(f"{relation.shape[0]} relation rows for {len(relations)} relations")
    if problems:
        raise CheckpointError(f"{directory} is inconsistent ({'; '.join(problems)}); {hint}")
    return table.float(), [str(e) for e in entities], meta


__all__ = [
    "KnowledgeGraph",
    "PykeenMissingError",
    "WN18RR_RELATIONS",
    "WordNetMissingError",
    "lemma_index",
    "load_entity_embeddings",
    "load_kg",
    "read_pykeen",
    "read_tsv",
    "read_wordnet",
    "save_entity_embeddings",
    "split_graph",
]
