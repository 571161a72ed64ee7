"""A tiny BERT checkpoint with a hand-made WordPiece vocabulary, and a domain corpus the vocabulary lacks tokens of:
what the vocabulary-extension tests extend."""

from __future__ import annotations

import random
from pathlib import Path

import torch

from bertzoo.config import ModelConfig
from bertzoo.data.tokens.tokenizer import SPECIAL_TOKENS, Tokenizer
from bertzoo.models.encoder import Encoder
from bertzoo.objectives.mlm import MaskedLM

LETTERS = "abcdefghijklmnopqrstuvwxyz"
WORDS = ["the", "of", "is", "and", "blood", "level", "high", "low", "hem", "cat"]
# Letters (alone and as ## pieces), a few whole words, and hemoglobin's pieces: every Latin word reads, in pieces;
# Chinese and Cyrillic characters are [UNK]; "©" reads, so "hemoglobin©" is one word.
VOCAB = [
    *SPECIAL_TOKENS,
    ".",
    ",",
    "©",
    *LETTERS,
    *(f"##{c}" for c in LETTERS),
    *WORDS,
    "##og",
    "##lo",
    "##bin",
    "##uria",
    "##©",
]
SIZES = {"hidden_size": 32, "num_layers": 2, "num_heads": 2, "intermediate_size": 64, "max_position": 64}


def tokenizer(directory: Path) -> Tokenizer:
    """The WordPiece tokenizer of VOCAB (lower-casing, as BERT's uncased models)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "vocab.txt").write_text("".join(t + "\n" for t in VOCAB), encoding="utf-8")
    return Tokenizer.from_vocab(directory / "vocab.txt")


def perturb(module: torch.nn.Module, seed: int, scale: float = 0.05) -> torch.nn.Module:
    """N(0, scale) noise added to every parameter (tied ones once): no zero bias, no identity LayerNorm."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn(p.shape, generator=g, dtype=p.dtype) * scale)
    return module.eval()


def make_checkpoint(directory: Path, *, heads: bool = True, seed: int = 0) -> Path:
    """A 2-layer, 32-wide BERT (masked LM + NSP heads, or a bare encoder) of VOCAB with every weight perturbed,
    saved with its tokenizer in `directory`."""
    tok = tokenizer(directory.parent / f"{directory.name}-vocab")
    config = ModelConfig(vocab_size=tok.vocab_size, **SIZES)
    torch.manual_seed(seed)
    model = MaskedLM(Encoder(config)) if heads else Encoder(config)
    perturb(model, seed)
    model.save_pretrained(directory)
    tok.save(directory)
    return directory


def domain_docs(n: int = 150, seed: int = 0) -> list[str]:
    """Sentences of made-up words (letter pieces: the count-based anchors) around a domain's terms: the word
    hemoglobin (4 pieces), Chinese characters and a Cyrillic word the vocabulary lacks."""
    r = random.Random(seed)
    filler = sorted({"".join(r.choice(LETTERS[:12]) for _ in range(r.randint(2, 4))) for _ in range(40)})
    docs = []
    for _ in range(n):
        words = [r.choice(filler) for _ in range(r.randint(4, 10))]
        terms = r.sample(["hemoglobin", "hemoglobin", "the blood level", "血 红", "血", "кровь", "high", "low"], 2)
        docs.append(" ".join(words[:3] + terms[:1] + words[3:] + terms[1:]) + ".")
    return docs
