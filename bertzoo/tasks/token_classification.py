"""Token classification (NER): a tag per word, BIO or IOBES, scored by entity F1 like seqeval.

Words are tokenized pre-split (`is_pretokenized`); the FIRST sub-word of each word carries the
word's label and the other sub-words and the specials carry -100, as in the BERT paper's NER
setup. Predictions are read at first sub-words and mapped back to words. A sentence longer than
`data.max_seq_len` is cut into overlapping windows of whole words (overlap: `data.doc_stride`
pieces, at most half a window); every window trains, and each word's prediction comes from the
window where it sits furthest from an edge (the most context on both sides), so nothing is
truncated away.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bertzoo.batch import IGNORE_INDEX, Batch
from bertzoo.config import FinetuneConfig, TechniqueConfig
from bertzoo.errors import ConfigError, DataError
from bertzoo.metrics.classification import accuracy, entity_metrics, format_table, get_entities
from bertzoo.models.heads import TokenClassificationHead
from bertzoo.objectives.base import ObjectiveOutput
from bertzoo.tasks.base import EvalResult, FeatureDataset, Task, TaskModel, batched_logits, output_width
from bertzoo.tasks.common import (
    attention_from_lengths,
    builtin_spec,
    check_max_len,
    eval_batch_size,
    example_index,
    labels_present,
    load_split,
    log_softmax,
    pad_2d,
    softmax,
)

__all__ = [
    "TokenClassificationModel",
    "TokenClassificationTask",
    "convert_scheme",
    "split_words",
    "tag_types",
    "tags_for_types",
]

SCHEME_PREFIXES = {"BIO": "BI", "IOBES": "BIES"}
_TAG = re.compile(r"^[BIES]-.+$")
# Characters that are words on their own when splitting raw text for prediction: CJK ideographs
# (BERT's _is_chinese_char ranges), CJK punctuation and full-width forms. Chinese NER is
# character-level, as in the built-in peoples-daily-ner dataset.
_CJK = (
    "\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef"
    "\U00020000-\U0002a6df\U0002a700-\U0002ceaf\U0002f800-\U0002fa1f"
)
_WORD = re.compile(f"[{_CJK}]|[^\\s{_CJK}]+")
_IS_CJK = re.compile(f"[{_CJK}]")


def tag_types(tags: Sequence[str]) -> list[str]:
    """Entity types in order of first appearance ("B-PER" -> "PER"); "O" has none."""
    return list(dict.fromkeys(t[2:] for t in tags if t != "O"))


def tags_for_types(types: Sequence[str], scheme: str) -> list[str]:
    """The full tag set of `scheme`: "O", then B-, I- (and E-, S- for IOBES) of each type."""
    return ["O", *(f"{p}-{t}" for t in types for p in SCHEME_PREFIXES[scheme])]


def convert_scheme(tags: Sequence[str], scheme: str) -> list[str]:
    """Re-write tags in `scheme` ("BIO" or "IOBES") from their entities as seqeval reads them, so
    BIO, IOB1 and IOBES input all come out canonical (an I- without B- starts an entity)."""
    out = ["O"] * len(tags)
    for type_, start, end in get_entities(list(tags)):
        if scheme == "IOBES" and start == end:
            out[start] = f"S-{type_}"
            continue
        out[start] = f"B-{type_}"
        for i in range(start + 1, end + 1):
            out[i] = f"I-{type_}"
        if scheme == "IOBES":
            out[end] = f"E-{type_}"
    return out


def split_words(text: str) -> list[tuple[str, int, int]]:
    """(word, char start, char end) of raw text: whitespace-separated words, except that CJK
    characters (and full-width forms) are words on their own."""
    return [(m.group(), m.start(), m.end()) for m in _WORD.finditer(text)]


def _join(words: Sequence[str]) -> str:
    """Words back to text: no space next to a CJK character (Chinese is written unspaced)."""
    out = ""
    for w in words:
        if out and not _IS_CJK.match(out[-1]) and not _IS_CJK.match(w):
            out += " "
        out += w
    return out


def _word_pieces(enc, n_words: int, unk_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Token ids of a pre-tokenized encoding and the index of each word's first piece. A word the
    normalizer erases (control or zero-width characters) gets one [UNK] so it keeps a position."""
    if n_words == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    ids = np.asarray(enc.ids, dtype=np.int64)
    word = np.fromiter((-1 if w is None else w for w in enc.word_ids), dtype=np.int64, count=len(ids))
    ids, word = ids[word >= 0], word[word >= 0]
    counts = np.bincount(word, minlength=n_words)
    if counts.all():
        return ids, np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    # A word's pieces are contiguous and in order: move each piece to its word's new offset.
    old_starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    sizes = np.maximum(counts, 1)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    out = np.full(int(sizes.sum()), unk_id, dtype=np.int64)
    out[starts[word] + np.arange(len(word)) - old_starts[word]] = ids
    return out, starts


def word_windows(starts: np.ndarray, n_pieces: int, budget: int, overlap: int) -> list[tuple[int, int]]:
    """Word ranges [w0, w1) whose pieces fit in `budget`, consecutive ones sharing about `overlap`
    pieces; they cover every word. A single word longer than `budget` gets a window of its own
    (its first piece, which carries its label, always fits)."""
    n = len(starts)
    if n_pieces <= budget or n == 0:
        return [(0, n)]
    ends = np.append(starts[1:], n_pieces)  # where each word's pieces end
    windows = []
    w0 = 0
    while True:
        w1 = max(int(np.searchsorted(ends, starts[w0] + budget, side="right")), w0 + 1)
        windows.append((w0, w1))
        if w1 >= n:
            return windows
        # The next window starts at the first word within `overlap` pieces of this one's end, but late
        # enough to take in at least word w1 (every window adds words), and never after w1 (no gap).
        nxt = int(np.searchsorted(starts, ends[w1 - 1] - overlap))
        fits_next = int(np.searchsorted(starts, ends[w1] - budget))
        w0 = min(max(nxt, fits_next, w0 + 1), w1)


def centrality(w0: int, w1: int) -> np.ndarray:
    """For each word of window [w0, w1): how many words of context it has on its poorer side."""
    j = np.arange(w1 - w0)
    return np.minimum(j, w1 - w0 - 1 - j)


class TokenClassificationModel(TaskModel):
    """Encoder + `TokenClassificationHead` (optionally a BiLSTM over the token features)."""

    # A tag would be read from the left context alone: refused rather than trained blind to the right.
    causal_refusal = (
        "token classification needs every token to see the words after it, which a left-to-right (GPT) "
        "model's tokens cannot; fine-tune a bidirectional model (BERT, RoBERTa, ...)"
    )

    def __init__(self, encoder: nn.Module, num_labels: int, technique: TechniqueConfig) -> None:
        super().__init__(encoder, technique.feature_layers, technique.feature_mix)
        self.num_labels = num_labels
        lstm_hidden = output_width(encoder) // 2 if technique.feature_head == "bilstm" else 0
        self.head = TokenClassificationHead(self.feature_dim, num_labels, technique.head_dropout, lstm_hidden)

    def loss_counts(self, batch: Batch) -> dict[str, int]:
        """Labelled words per batch: micro-batches and ranks are weighted by them (see ObjectiveOutput)."""
        return {"tags": int((batch.labels != IGNORE_INDEX).sum())} if batch.labels is not None else {}

    def forward(self, batch: Batch) -> ObjectiveOutput:
        sequence, _ = self.encode(batch)
        logits = self.head(sequence, batch.attention_mask)  # (batch, seq, num_labels)
        labels = batch.labels
        if labels is None:
            return ObjectiveOutput(loss=None, logits=logits)
        flat = logits.float().reshape(-1, self.num_labels)
        target = labels.reshape(-1)
        scored = target != IGNORE_INDEX
        n = scored.sum()
        if bool(n == 0):  # every word truncated away: a zero loss that still has a graph
            loss = flat.sum() * 0.0
        else:
            loss = F.cross_entropy(flat, target, ignore_index=IGNORE_INDEX)
        correct = ((flat.argmax(-1) == target) & scored).sum()
        acc = correct.float() / n.clamp(min=1)
        return ObjectiveOutput(
            loss=loss,
            metrics={"loss": loss.detach(), "acc": acc.detach()},
            counts={"loss": torch.ones((), device=flat.device), "acc": n},
            logits=logits,
            terms={"tags": (loss, 1.0)},
        )


class TokenClassificationTask(Task):
    """NER and other word tagging; see the module doc.

    The tag set is "O" plus every prefix of `data.label_scheme` for each entity type. Types come
    from `data.labels` (tags or bare types), a built-in dataset, or the train split (in order of
    first appearance). Gold tags are converted to the scheme on load.
    """

    name = "token_classification"
    default_metric = "f1"

    def __init__(self, cfg: FinetuneConfig, tokenizer) -> None:
        super().__init__(cfg, tokenizer)
        self.scheme = cfg.data.label_scheme
        if self.scheme not in SCHEME_PREFIXES:
            raise ConfigError(f"data.label_scheme={self.scheme!r} is not allowed; choose BIO or IOBES")
        spec = builtin_spec(cfg)
        self._labels: list[str] | None = None
        if cfg.data.labels:
            given = [str(x) for x in cfg.data.labels]
            if all(t == "O" or _TAG.match(t) for t in given):
                types = tag_types(given)
                full = tags_for_types(types, self.scheme)
                # A complete tag list (e.g. saved with a model) keeps its order; partial ones are expanded.
                self._labels = given if sorted(given) == sorted(full) and len(given) == len(full) else full
            else:
                self._labels = tags_for_types(list(dict.fromkeys(given)), self.scheme)
        elif spec is not None:
            self._labels = tags_for_types(tag_types(spec.labels()), self.scheme)

    # -- labels ---------------------------------------------------------------------------------

    def label_names(self) -> list[str]:
        self._ensure_labels()
        return list(self._labels or [])

    def head_config(self) -> dict[str, Any]:
        t = self.cfg.technique
        return {
            **super().head_config(),
            "label_scheme": self.scheme,
            "feature_layers": t.feature_layers,
            "feature_mix": t.feature_mix,
            "feature_head": t.feature_head,
        }

    def _ensure_labels(self) -> None:
        if self._labels is None:
            self.load("train")

    def _canonical(self, examples: list[dict[str, Any]]) -> None:
        for ex in examples:
            if "labels" not in ex:
                continue
            bad = next((t for t in ex["labels"] if t != "O" and not _TAG.match(t)), None)
            if bad is not None:
                raise DataError(
                    f"{ex.get('source', 'an example')}: tag {bad!r} is not O or B-/I-/E-/S-TYPE; "
                    "token classification reads BIO, IOB1 or IOBES tags"
                )
            ex["labels"] = convert_scheme(ex["labels"], self.scheme)

    # -- data -----------------------------------------------------------------------------------

    def load(self, split: str) -> list[dict[str, Any]]:
        examples = load_split(self.cfg, split, "tokens")
        self._canonical(examples)
        labelled = labels_present(examples, "labels", "labels")
        if not labelled:
            raise DataError(
                f"{examples[0].get('source', split)}: the {split} split has no labels; give a label column "
                "(for unlabelled data use `bertzoo predict`)"
            )
        if split == "train" and self._labels is None:
            self._labels = tags_for_types(tag_types([t for ex in examples for t in ex["labels"]]), self.scheme)
        elif self._labels is None:
            self._ensure_labels()
        known = set(self._labels or [])
        for ex in examples:
            bad = next((t for t in ex.get("labels", ()) if t not in known), None)
            if bad is not None:
                types = ", ".join(tag_types(self._labels or [])) or "none"
                raise DataError(
                    f"{ex.get('source', split)}: entity type {bad[2:]!r} is not among the types seen in train "
                    f"({types}); fix the data or list every type in data.labels"
                )
        return examples

    def featurize(self, examples: list[dict[str, Any]], split: str) -> FeatureDataset:
        if not examples:
            raise DataError(f"the {split} split is empty; check the data")
        tok = self.tokenizer
        budget = check_max_len(tok, self.cfg.data.max_seq_len, pair=False)
        labelled = labels_present(examples, "labels", "labels")
        index: dict[str, int] = {}
        if labelled:
            self._ensure_labels()
            index = {t: i for i, t in enumerate(self._labels or [])}
        encodings = tok.backend.encode_batch(
            [list(ex["tokens"]) for ex in examples], is_pretokenized=True, add_special_tokens=False
        )
        overlap = max(0, min(self.cfg.data.doc_stride, budget // 2))
        features, lengths, example_ids = [], [], []
        for n, (ex, enc) in enumerate(zip(examples, encodings, strict=True)):
            words = ex["tokens"]
            pieces, starts = _word_pieces(enc, len(words), tok.unk_id)
            if labelled:
                try:
                    tags = np.asarray([index[t] for t in ex["labels"]], dtype=np.int64)
                except KeyError as exc:
                    raise DataError(f"{ex.get('source', split)}: unknown tag {exc.args[0]!r}; fix the data") from None
            for w0, w1 in word_windows(starts, len(pieces), budget, overlap):
                p0 = int(starts[w0]) if w0 < len(starts) else 0
                p1 = min(int(starts[w1]) if w1 < len(starts) else len(pieces), p0 + budget)
                ids = np.concatenate([[tok.cls_id], pieces[p0:p1], [tok.sep_id]])
                f: dict[str, Any] = {
                    "input_ids": ids.astype(np.int32),
                    "word_starts": starts[w0:w1] - p0 + 1,  # +1: [CLS] comes first
                    "word_range": (w0, w1),
                }
                if labelled:
                    labels = np.full(len(ids), IGNORE_INDEX, dtype=np.int64)
                    labels[f["word_starts"]] = tags[w0:w1]
                    f["labels"] = labels
                features.append(f)
                lengths.append(len(ids))
                example_ids.append(n)
        return FeatureDataset(features, lengths, example_ids)

    def collate(self, features: list[dict[str, Any]]) -> Batch:
        ids, lengths = pad_2d([f["input_ids"] for f in features], self.tokenizer.pad_id)
        labels = None
        if "labels" in features[0]:
            labels, _ = pad_2d([f["labels"] for f in features], IGNORE_INDEX)
        return Batch(
            input_ids=ids,
            attention_mask=attention_from_lengths(lengths, ids.size(1)),
            token_type_ids=torch.zeros_like(ids),
            labels=labels,
            example_index=example_index(features),
        )

    # -- model ----------------------------------------------------------------------------------

    def build(self, encoder: nn.Module) -> TokenClassificationModel:
        model = TokenClassificationModel(encoder, len(self.label_names()), self.cfg.technique)
        model.head_config = self.head_config()
        return model

    # -- evaluation and prediction ----------------------------------------------------------------

    def _word_tags(self, model: nn.Module, examples: list[dict[str, Any]], features: FeatureDataset):
        """Per example: (word tags, logits at its words); plus every feature's logits.

        Windows of one example are merged word by word, each word taken from the window where it
        has the most context on its poorer side."""
        logits = batched_logits(model, features, self.collate, eval_batch_size(self.cfg))
        labels = self._labels or []
        n_labels = max(1, len(labels))
        merged = [np.zeros((len(ex["tokens"]), n_labels)) for ex in examples]
        best = [np.full(len(ex["tokens"]), -1) for ex in examples]
        for n, f, row in zip(features.example_ids, features.features, logits, strict=True):
            w0, w1 = f["word_range"]
            at_words = np.asarray(row, dtype=np.float64)[f["word_starts"]]  # (words in window, num_labels)
            score = centrality(w0, w1)
            better = score > best[n][w0:w1]
            merged[n][w0:w1][better] = at_words[better]
            best[n][w0:w1][better] = score[better]
        out = []
        for rows, seen in zip(merged, best, strict=True):
            # Words never scored (none, by construction of the windows) would read "O".
            tags = [labels[i] if ok else "O" for i, ok in zip(rows.argmax(-1), seen >= 0, strict=True)]
            out.append((tags, rows[seen >= 0]))
        return out, logits

    def evaluate(self, model: nn.Module, examples: list[dict[str, Any]], features: FeatureDataset) -> EvalResult:
        if not labels_present(examples, "labels", "labels"):
            raise DataError("evaluation needs tagged examples; use predict for untagged data")
        results, logits = self._word_tags(model, examples, features)
        gold = [ex["labels"] for ex in examples]
        pred = [tags for tags, _ in results]
        m = entity_metrics(gold, pred)
        nll_sum, n_scored = 0.0, 0  # over every window's scored words, as in training
        for f, row in zip(features.features, logits, strict=True):
            target = f["labels"]
            scored = np.flatnonzero(target != IGNORE_INDEX)
            if len(scored):
                lp = log_softmax(np.asarray(row, dtype=np.float64)[scored])
                nll_sum -= float(lp[np.arange(len(scored)), target[scored]].sum())
                n_scored += len(scored)
        truncated = sum(len(ex["tokens"]) - len(r) for ex, (_, r) in zip(examples, results, strict=True))
        metrics = {
            "precision": m["precision"],
            "recall": m["recall"],
            "f1": m["f1"],
            "macro_f1": m["macro_f1"],
            "accuracy": accuracy([t for s in gold for t in s], [t for s in pred for t in s]),
            "loss": nll_sum / n_scored if n_scored else 0.0,
            "truncated_words": float(truncated),
        }
        predictions = [
            {"tokens": list(ex["tokens"]), "labels": tags, "gold": list(ex["labels"])}
            for ex, tags in zip(examples, pred, strict=True)
        ]
        report = {
            "labels": self.label_names(),
            "per_type": m["per_type"],
            "table": format_table(m["per_type"]),
            "truncated_words": truncated,
            "n_gold_entities": m["n_gold"],
            "n_pred_entities": m["n_pred"],
        }
        return EvalResult(metrics={k: float(v) for k, v in metrics.items()}, predictions=predictions, report=report)

    def predict(self, model: nn.Module, examples: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Each example has "tokens" (a word list) or "text" (split by `split_words`). The result
        lists word tags and entities with word spans [start, end) and, for text input, character
        spans [char_start, char_end) into the text."""
        self._ensure_labels()
        inputs, spans, texts = [], [], []
        for ex in examples:
            if isinstance(ex.get("tokens"), list):
                inputs.append({"tokens": [str(t) for t in ex["tokens"]]})
                spans.append(None)
                texts.append("")
            elif isinstance(ex.get("text"), str):
                words = split_words(ex["text"])
                inputs.append({"tokens": [w for w, _, _ in words]})
                spans.append(words)
                texts.append(ex["text"])
            else:
                raise DataError(f"{ex.get('source', 'an example')}: prediction input needs 'tokens' (a list) or 'text'")
        if not inputs:
            return []
        features = self.featurize(inputs, "predict")
        out = []
        results, _ = self._word_tags(model, inputs, features)
        for inp, words, text, (tags, at_words) in zip(inputs, spans, texts, results, strict=True):
            tokens = inp["tokens"]
            probs = softmax(at_words) if len(at_words) else np.zeros((0, 0))
            entities = []
            for type_, start, end in get_entities(tags):
                ent: dict[str, Any] = {
                    "type": type_,
                    "start": start,
                    "end": end + 1,
                    "text": text[words[start][1] : words[end][2]]
                    if words is not None
                    else _join(tokens[start : end + 1]),
                    # Mean probability of the predicted tags over the entity's words that were scored.
                    "score": float(np.mean([probs[i].max() for i in range(start, min(end + 1, len(probs)))] or [0.0])),
                }
                if words is not None:
                    ent["char_start"], ent["char_end"] = words[start][1], words[end][2]
                entities.append(ent)
            out.append({"tokens": tokens, "labels": tags, "entities": entities})
        return out
