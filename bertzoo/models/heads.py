"""Heads: small modules that read an encoder's hidden states. Losses belong to objectives (a plain projection head
also computes its cross-entropy fused with the projection, which only it can)."""

from __future__ import annotations

import torch
from torch import nn

from bertzoo.nn import activation
from bertzoo.nn.linear_ce import linear_cross_entropy


class MaskedLMHead(nn.Module):
    """Transform (dense + activation + LayerNorm) then a decoder tied to the word embeddings.

    Call it on the hidden states of the masked positions only: with 15% of tokens masked this
    skips ~85% of the (tokens x vocab) product, which dominates a small model's step.
    """

    def __init__(
        self,
        hidden_size: int,
        vocab_size: int,
        *,
        embedding_size: int | None = None,
        act: str = "gelu",
        layer_norm_eps: float = 1e-12,
        tied_weight: nn.Parameter | None = None,
    ) -> None:
        super().__init__()
        width = embedding_size or hidden_size  # ALBERT projects back to the embedding width
        self.dense = nn.Linear(hidden_size, width)
        self.act = activation(act)
        self.norm = nn.LayerNorm(width, eps=layer_norm_eps)
        self.decoder = nn.Linear(width, vocab_size)
        if tied_weight is not None:
            self.decoder.weight = tied_weight
        nn.init.zeros_(self.decoder.bias)

    def forward(self, hidden: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """hidden: (..., hidden). positions: optional bool mask or index over the leading dims; then
        the result is (num_selected, vocab) for those positions only."""
        if positions is not None:
            hidden = hidden[positions]  # (num_selected, hidden)
        return self.decoder(self.norm(self.act(self.dense(hidden))))


class LMHead(nn.Module):
    """A next-token decoder: Linear(hidden -> vocab), its weight tied to the word embeddings, without bias
    (GPT) or with one (`bias=True`, XLNet). There is no transform before it: the top layer's states are the
    features."""

    def __init__(
        self, hidden_size: int, vocab_size: int, *, tied_weight: nn.Parameter | None = None, bias: bool = False
    ) -> None:
        super().__init__()
        self.decoder = nn.Linear(hidden_size, vocab_size, bias=bias)
        if bias:
            nn.init.zeros_(self.decoder.bias)
        if tied_weight is not None:
            self.decoder.weight = tied_weight

    def forward(
        self, hidden: torch.Tensor, targets: torch.Tensor | None = None
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """hidden: (..., hidden) -> logits (..., vocab). With `targets` (rows,) for hidden (rows, hidden): (mean
        cross-entropy, rows predicted right) computed chunk by chunk without keeping the logits
        (bertzoo.nn.linear_ce); through the module call, so wrappers that hook it (FSDP) still see it run."""
        if targets is None:
            if few_rows(hidden):
                return few_rows_logits(hidden, self.decoder.weight, self.decoder.bias)
            return self.decoder(hidden)
        return linear_cross_entropy(hidden, self.decoder.weight, self.decoder.bias, targets)


# A decoding step projects a handful of rows onto the whole vocabulary. On CPU, `F.linear` of (rows, hidden)
# against a (vocab, hidden) weight ran at half the speed of the same product taken as weight @ rows.T for
# 1-8 rows (8192 x 256 and 32,128 x 512, one thread, AVX2; docs/performance.md), and no slower up to 32 rows.
FEW_ROWS = 32


def few_rows(hidden: torch.Tensor) -> bool:
    """Whether `hidden` is a decoding step's few rows on the CPU, with no gradient to carry (inference only)."""
    return (
        hidden.dim() == 2
        and hidden.size(0) <= FEW_ROWS
        and hidden.device.type == "cpu"
        and not (torch.is_grad_enabled() and hidden.requires_grad)
    )


def few_rows_logits(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """hidden (rows, hidden) @ weight.T (+ bias) computed as (weight @ hidden.T).T: (rows, vocab)."""
    logits = (weight @ hidden.T).T
    return logits if bias is None else logits + bias


class SentencePairHead(nn.Module):
    """Binary classifier on the pooled [CLS] vector: next-sentence (BERT) or sentence-order (ALBERT)."""

    def __init__(self, hidden_size: int, num_labels: int = 2) -> None:
        super().__init__()
        self.classifier = nn.Linear(hidden_size, num_labels)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        return self.classifier(pooled)


class ClassificationHead(nn.Module):
    """Dropout + linear on a sentence vector (pooled [CLS]); num_labels=1 gives a score (regression,
    or one choice's score in multiple choice). `bias=False` is GPT's `h W_y` (transformers' `score`)."""

    def __init__(self, in_dim: int, num_labels: int, dropout: float = 0.1, *, bias: bool = True) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(in_dim, num_labels, bias=bias)
        nn.init.normal_(self.classifier.weight, std=0.02)
        if self.classifier.bias is not None:
            nn.init.zeros_(self.classifier.bias)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.dropout(features))


class TokenClassificationHead(nn.Module):
    """Per-token labels (NER). With `lstm_hidden` > 0 a BiLSTM runs over the token features first:
    the feature-based tagger of the BERT paper's NER ablation."""

    def __init__(self, in_dim: int, num_labels: int, dropout: float = 0.1, lstm_hidden: int = 0) -> None:
        super().__init__()
        self.lstm = nn.LSTM(in_dim, lstm_hidden, batch_first=True, bidirectional=True) if lstm_hidden else None
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(2 * lstm_hidden if lstm_hidden else in_dim, num_labels)
        nn.init.normal_(self.classifier.weight, std=0.02)
        nn.init.zeros_(self.classifier.bias)

    def forward(self, features: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """features: (batch, seq, in_dim) -> (batch, seq, num_labels)."""
        if self.lstm is not None:
            if attention_mask is not None:
                lengths = attention_mask.sum(-1).clamp(min=1).cpu()
                packed = nn.utils.rnn.pack_padded_sequence(features, lengths, batch_first=True, enforce_sorted=False)
                out, _ = self.lstm(packed)
                features, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=features.size(1))
            else:
                features, _ = self.lstm(features)
        return self.classifier(self.dropout(features))


class SpanHead(nn.Module):
    """Extractive QA: a start and an end score per token (BERT's S and E vectors)."""

    def __init__(self, in_dim: int) -> None:
        super().__init__()
        self.qa = nn.Linear(in_dim, 2)
        nn.init.normal_(self.qa.weight, std=0.02)
        nn.init.zeros_(self.qa.bias)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """(batch, seq, in_dim) -> (batch, seq, 2): [..., 0] start logits, [..., 1] end logits."""
        return self.qa(features)


class ReplacedTokenDetectionHead(nn.Module):
    """ELECTRA's discriminator head: dense -> activation -> Linear(hidden, 1), one logit per token
    ("was this token replaced?"); Hugging Face's ElectraDiscriminatorPredictions."""

    def __init__(self, hidden_size: int, act: str = "gelu") -> None:
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.act = activation(act)
        self.prediction = nn.Linear(hidden_size, 1)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """(..., hidden) -> (...): the replaced-token logit of every position."""
        return self.prediction(self.act(self.dense(hidden))).squeeze(-1)


class SpanBoundaryHead(nn.Module):
    """SpanBERT's span boundary objective head: a token x_i of a masked span (x_s .. x_e) is predicted
    from the encodings of the boundary tokens just outside it, x_{s-1} and x_{e+1}, and a learned
    embedding of its position i - s inside the span:

        h = LayerNorm(act(W2 LayerNorm(act(W1 [x_{s-1}; x_{e+1}; p_{i-s}]))));  logits = decoder(h)

    with the decoder tied to the word embeddings. Relative positions beyond the table are clamped.
    """

    def __init__(
        self,
        hidden_size: int,
        vocab_size: int,
        *,
        max_positions: int = 32,
        embedding_size: int | None = None,
        act: str = "gelu",
        layer_norm_eps: float = 1e-12,
        tied_weight: nn.Parameter | None = None,
    ) -> None:
        super().__init__()
        width = embedding_size or hidden_size  # ALBERT-style factorized embeddings: decode at their width
        self.position = nn.Embedding(max_positions, hidden_size)
        self.dense1 = nn.Linear(3 * hidden_size, hidden_size)
        self.norm1 = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.dense2 = nn.Linear(hidden_size, width)
        self.norm2 = nn.LayerNorm(width, eps=layer_norm_eps)
        self.act = activation(act)
        self.decoder = nn.Linear(width, vocab_size)
        if tied_weight is not None:
            self.decoder.weight = tied_weight
        nn.init.zeros_(self.decoder.bias)

    def forward(
        self, hidden: torch.Tensor, positions: torch.Tensor, span_start: torch.Tensor, span_end: torch.Tensor
    ) -> torch.Tensor:
        """hidden: (batch, seq, hidden); positions: (batch, seq) bool, the tokens to predict;
        span_start / span_end: (batch, seq) first and last position of each token's span.
        Returns (num_selected, vocab)."""
        rows, cols = positions.nonzero(as_tuple=True)  # (n,) each
        start, end = span_start[rows, cols], span_end[rows, cols]
        last = hidden.size(1) - 1
        left = hidden[rows, (start - 1).clamp(0, last)]  # x_{s-1}: (n, hidden)
        right = hidden[rows, (end + 1).clamp(0, last)]  # x_{e+1}
        rel = (cols - start).clamp(0, self.position.num_embeddings - 1)
        x = torch.cat([left, right, self.position(rel)], dim=-1)  # (n, 3 * hidden)
        x = self.norm1(self.act(self.dense1(x)))
        x = self.norm2(self.act(self.dense2(x)))
        return self.decoder(x)


class TokenTaskHead(nn.Module):
    """A per-token classifier with its own transform (dense + activation + LayerNorm, as the masked-LM head's), so a
    word-level task (ERNIE 2.0's capitalization or token-document relation) does not share the masked-LM head's
    features. Call it on the labelled positions only."""

    def __init__(
        self, hidden_size: int, num_labels: int = 2, *, act: str = "gelu", layer_norm_eps: float = 1e-12
    ) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.act = activation(act)
        self.norm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.classifier = nn.Linear(hidden_size, num_labels)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """(..., hidden) -> (..., num_labels)."""
        return self.classifier(self.norm(self.act(self.dense(hidden))))
