"""Generation metrics: ROUGE-1/2/L F1, corpus BLEU and exact match of generated texts against references.

ROUGE comes from Google's `rouge-score` package and BLEU from `sacrebleu`, the reference
implementations papers report (install them with `pip install 'bertzoo[generate]'`). Every value
is a fraction in [0, 1], like the rest of `bertzoo.metrics.classification`: BLEU is sacrebleu's score / 100.

* ROUGE: the mean over examples of each pair's F-measure (`rouge1`, `rouge2`, `rougeL`: LCS over the
  whole text, no sentence splitting), Porter stemming on as in the papers. rouge-score's own
  tokenizer keeps only `[a-z0-9]`, so "café" scores as "caf" and Chinese text as nothing at all;
  `RougeTokenizer` keeps every script's letters and digits, and cuts CJK text into single
  characters (it has no spaces between words). On ASCII text it tokenizes exactly as rouge-score.
  A one-word prediction or reference has no bigrams: its `rouge2` is 0 even when it is right.
* BLEU: `sacrebleu.corpus_bleu` with its defaults (4-grams, exponential smoothing, 13a
  tokenization), but the `zh` tokenization when a reference holds CJK characters: 13a leaves an
  unspaced Chinese sentence as one token. Corpus BLEU counts 4-grams: it is 0 when no prediction
  has four tokens, and on targets of mostly one to three words (titles, topic names) it rests on
  the few longer ones, so read ROUGE and exact match there.
* exact match: SQuAD's answer normalisation (`metrics_squad.normalize_answer`: lowercase, drop ASCII
  punctuation and the articles a/an/the, collapse whitespace), then string equality; the share of
  examples that match.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from typing import Any

import bertzoo.metrics.squad as metrics_squad
from bertzoo.errors import ConfigError, DataError

__all__ = ["ROUGE_TYPES", "RougeTokenizer", "bleu_tokenization", "generation_metrics"]

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")
INSTALL_HINT = "pip install 'bertzoo[generate]'"

# Scripts written without spaces between words, each character one token: CJK ideographs (with
# extension A and B and the compatibility block), Hiragana and Katakana.
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002a6df]")
# A run of letters or digits in any script (`\w` without the underscore rouge-score also splits on).
_WORD = re.compile(r"[^\W_]+")


def _backends() -> tuple[Any, Any, Any]:
    """(rouge_scorer, sacrebleu, PorterStemmer), imported on first use so the rest of bertzoo works
    without them; ConfigError naming the extra to install otherwise."""
    try:
        import sacrebleu
        from nltk.stem.porter import PorterStemmer  # rouge-score's own stemmer (nltk is its dependency)
        from rouge_score import rouge_scorer
    except ImportError as exc:
        raise ConfigError(
            f"generation metrics need rouge-score and sacrebleu ({exc.name or exc} is missing): {INSTALL_HINT}"
        ) from None
    return rouge_scorer, sacrebleu, PorterStemmer


class RougeTokenizer:
    """rouge-score's tokenization for every script: NFKC, lowercase, runs of letters/digits as tokens,
    each CJK character a token, Porter stemming of tokens longer than 3 characters (rouge-score's
    rule). Identical to rouge-score's default tokenizer (with stemming) on ASCII text."""

    def __init__(self, stemmer: Any = None) -> None:
        self._stemmer = stemmer

    def tokenize(self, text: str) -> list[str]:
        text = unicodedata.normalize("NFKC", text).lower()
        if _CJK.search(text):
            text = _CJK.sub(r" \g<0> ", text)
        tokens = _WORD.findall(text)
        if self._stemmer is None:
            return tokens
        return [self._stemmer.stem(t) if len(t) > 3 else t for t in tokens]


def bleu_tokenization(references: Sequence[str]) -> str:
    """sacrebleu's tokenization for these references: `zh` when any holds a CJK character, else `13a`."""
    return "zh" if any(_CJK.search(r) for r in references) else "13a"


def _check(predictions: Sequence[str], references: Sequence[str]) -> None:
    if len(predictions) != len(references):
        raise DataError(f"{len(predictions)} predictions but {len(references)} references; they must pair up")
    if not predictions:
        raise DataError("no predictions to score: generation metrics need at least one prediction and reference")
    for name, texts in (("prediction", predictions), ("reference", references)):
        bad = next((i for i, t in enumerate(texts) if not isinstance(t, str)), None)
        if bad is not None:
            raise DataError(f"{name} {bad} is of type {type(texts[bad]).__name__}, not str")


def generation_metrics(predictions: list[str], references: list[str]) -> dict[str, float]:
    """ROUGE-1/2/L F1, corpus BLEU and exact match of `predictions` against `references` (one
    reference per prediction), all fractions in [0, 1]: {"rouge1", "rouge2", "rougeL", "bleu",
    "exact_match"}. DataError for empty or unpaired inputs; ConfigError without rouge-score or
    sacrebleu. See the module doc for tokenization and normalisation."""
    _check(predictions, references)
    rouge_scorer, sacrebleu, stemmer = _backends()
    scorer = rouge_scorer.RougeScorer(list(ROUGE_TYPES), tokenizer=RougeTokenizer(stemmer()))
    totals = dict.fromkeys(ROUGE_TYPES, 0.0)
    for prediction, reference in zip(predictions, references, strict=True):
        scores = scorer.score(reference, prediction)  # rouge-score's order: (target, prediction)
        for key in ROUGE_TYPES:
            totals[key] += scores[key].fmeasure
    n = len(predictions)
    out = {key: total / n for key, total in totals.items()}
    bleu = sacrebleu.corpus_bleu(list(predictions), [list(references)], tokenize=bleu_tokenization(references))
    out["bleu"] = float(bleu.score) / 100.0
    out["exact_match"] = sum(metrics_squad.exact_match(p, r) for p, r in zip(predictions, references, strict=True)) / n
    return out
