"""ELMo (Peters et al. 2018): a character CNN token encoder under a bidirectional LSTM language model.

Each token is spelled out as characters (`char_table`, a buffer of the model so a saved model needs no
vocabulary file), embedded, convolved with filters of several widths, max-pooled over the characters,
passed through highway layers and projected to the LSTM width. Two separate LSTM stacks read the
tokens left to right and right to left; each LSTM has a projection (`proj_size`) and the second and
later layers add their input back (a residual link). One softmax (weight and bias) serves both
directions. The representations ELMo hands to a downstream model are every layer's [forward; backward]
states, mixed by `bertzoo.nn.scalar_mix.ScalarMix`; the language-model loss is
`bertzoo.objectives.bilm`.

The sizes are `ElmoConfig`'s fields (char_filters, max_chars, char_embedding_size, highway_layers,
lstm_size; hidden_size is the projection, num_layers the LSTM layers per direction); the presets and the
pretraining recipe are the variant's (`bertzoo.variants.elmo`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from bertzoo.config import ModelConfig
from bertzoo.errors import ConfigError

# Character ids: 0 pads the row, a UTF-8 byte b is b + 1, then the markers and one id per special token.
CHAR_PAD = 0
BEGIN_OF_WORD = 257
END_OF_WORD = 258
# A WordPiece continuation (`##ing`) starts with this instead of BEGIN_OF_WORD: the CNN sees the same
# characters as in the word "ing" (the point of stripping `##`) but can still tell the two apart.
CONTINUATION = 259
CONTINUATION_PREFIX = "##"
# Special tokens of the three tokenizer kinds (bertzoo.data.tokens.tokenizer): spelled as bytes they would look
# like ordinary words ("[PAD]" shares "PAD" with "PADdle"), so each gets one reserved character of its own.
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "<s>", "</s>", "<pad>", "<unk>", "<mask>")
FIRST_SPECIAL = 260
CHAR_VOCAB_SIZE = FIRST_SPECIAL + len(SPECIAL_TOKENS)


@dataclass
class ElmoConfig(ModelConfig):
    """`ModelConfig` for an ELMo: `hidden_size` is the LSTMs' projected output and the token representation's
    width, `num_layers` the LSTM layers of each direction, `dropout` their output dropout; the attention fields
    are not read. The rest is the character CNN, its highway layers and the LSTM cells."""

    char_filters: list[list[int]] = field(default_factory=list)  # [width, count] pairs of the character CNN
    max_chars: int = 50  # characters (UTF-8 bytes) per token, the begin/end-of-word markers included
    char_embedding_size: int = 16
    highway_layers: int = 0
    lstm_size: int = 0  # LSTM cell width, projected to hidden_size at each step

    def __post_init__(self) -> None:
        super().__post_init__()
        filters = []
        for i, pair in enumerate(self.char_filters):
            ok = isinstance(pair, (list, tuple)) and len(pair) == 2
            if not ok or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in pair):
                raise ConfigError(
                    f"model.char_filters[{i}]={pair!r} is not a [width, count] pair of positive integers; "
                    "write e.g. [[1, 32], [2, 32], [3, 64]]"
                )
            filters.append([int(pair[0]), int(pair[1])])
        self.char_filters = filters  # lists (as JSON gives them), so a config equals its round trip
        for name in ("highway_layers", "lstm_size"):
            if getattr(self, name) < 0:
                raise ConfigError(f"model.{name} must be >= 0, got {getattr(self, name)}")
        if self.char_embedding_size <= 0:
            raise ConfigError(f"model.char_embedding_size must be positive, got {self.char_embedding_size}")
        if self.max_chars < 3:
            raise ConfigError(
                f"model.max_chars={self.max_chars} leaves no room for a character between the word markers; use >= 3"
            )
        widest = max((w for w, _ in filters), default=0)
        if widest > self.max_chars:
            raise ConfigError(
                f"model.char_filters has a filter of width {widest}, wider than max_chars={self.max_chars}: it has "
                "no position to look at; raise model.max_chars or drop the filter"
            )


def char_table(vocab: Sequence[str], max_chars: int = 50) -> torch.Tensor:
    """(vocab, max_chars) int64 character ids of every token id: BEGIN_OF_WORD (CONTINUATION for a `##`
    piece, prefix stripped), the token's UTF-8 bytes + 1 cut to max_chars - 2, END_OF_WORD, then 0s. A
    special token is [BEGIN_OF_WORD, its reserved id, END_OF_WORD]."""
    if max_chars < 3:
        raise ConfigError(f"max_chars={max_chars} leaves no room for a character between the word markers")
    table = torch.zeros(len(vocab), max_chars, dtype=torch.long)
    for index, token in enumerate(vocab):
        start = BEGIN_OF_WORD
        if token in SPECIAL_TOKENS:
            body = [FIRST_SPECIAL + SPECIAL_TOKENS.index(token)]
        else:
            if token.startswith(CONTINUATION_PREFIX) and len(token) > len(CONTINUATION_PREFIX):
                start, token = CONTINUATION, token[len(CONTINUATION_PREFIX) :]
            # Bytes, not code points: 256 ids cover every script, and a long word keeps its first bytes.
            body = [b + 1 for b in token.encode("utf-8")[: max_chars - 2]]
        row = [start, *body, END_OF_WORD]
        table[index, : len(row)] = torch.tensor(row)
    return table


def check_config(config: ElmoConfig) -> None:
    """ConfigError unless `config` describes an ELMo: `ElmoConfig` checks its fields one by one; this checks
    that they are filled in."""
    if not config.char_filters:
        raise ConfigError(
            "model.char_filters is empty: an ELMo needs its character CNN; start from a preset (elmo-mini)"
        )
    if config.lstm_size <= config.hidden_size:
        raise ConfigError(
            f"model.lstm_size={config.lstm_size} must exceed model.hidden_size={config.hidden_size}: each LSTM "
            "projects its cell down to hidden_size (the paper: 4096 -> 512)"
        )


class Highway(nn.Module):
    """y = g * x + (1 - g) * relu(W x), g = sigmoid(W_g x) (Srivastava et al. 2015), one layer."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.proj = nn.Linear(size, 2 * size)  # [transform; gate] in one matmul
        with torch.no_grad():
            # Carry the input through at first (g near 0.73), as AllenNLP's ELMo starts.
            self.proj.bias[size:].fill_(1.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        transform, gate = self.proj(x).chunk(2, dim=-1)
        gate = torch.sigmoid(gate)
        return gate * x + (1 - gate) * F.relu(transform)


class CharCNN(nn.Module):
    """Character ids -> token vectors: embed, convolve (one Conv1d per filter width), max-pool over the
    characters, ReLU, highway layers, project to `hidden_size`."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        c = config
        self.char_embeddings = nn.Embedding(CHAR_VOCAB_SIZE, c.char_embedding_size, padding_idx=CHAR_PAD)
        self.convs = nn.ModuleList(nn.Conv1d(c.char_embedding_size, n, w) for w, n in c.char_filters)
        num_filters = sum(n for _, n in c.char_filters)
        self.highways = nn.ModuleList(Highway(num_filters) for _ in range(c.highway_layers))
        self.projection = nn.Linear(num_filters, c.hidden_size)

    def forward(self, chars: torch.Tensor) -> torch.Tensor:
        """(batch, seq, max_chars) character ids -> (batch, seq, hidden) token representations."""
        batch, seq, max_chars = chars.shape
        x = self.char_embeddings(chars.reshape(batch * seq, max_chars))  # (tokens, max_chars, char_emb)
        x = x.transpose(1, 2)  # (tokens, char_emb, max_chars): Conv1d convolves the last dim
        # max then ReLU equals ReLU then max (ReLU is monotone) and touches fewer numbers.
        pooled = [F.relu(conv(x).amax(dim=-1)) for conv in self.convs]  # each (tokens, filters_w)
        x = torch.cat(pooled, dim=-1)  # (tokens, num_filters)
        for highway in self.highways:
            x = highway(x)
        return self.projection(x).reshape(batch, seq, -1)  # (batch, seq, hidden)


def reverse_padded(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Reverse each row's first `lengths[b]` positions of (batch, seq, ...) and leave its padding in place.

    Run on a right-padded batch, a left-to-right LSTM then reads each row's tokens right to left and
    meets the padding only after the last real token, so no real state depends on padding."""
    seq = x.shape[1]
    positions = torch.arange(seq, device=x.device).expand(x.shape[0], seq)  # (batch, seq)
    flipped = lengths.unsqueeze(1) - 1 - positions
    index = torch.where(flipped >= 0, flipped, positions)  # an involution: applying it twice is the identity
    return x.gather(1, index.view(*index.shape, *([1] * (x.dim() - 2))).expand_as(x))


class LSTMStack(nn.Module):
    """Projected LSTM layers run left to right; layer l > 0 adds its input back (residual)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        c = config
        self.layers = nn.ModuleList(
            nn.LSTM(c.hidden_size, c.lstm_size, proj_size=c.hidden_size, batch_first=True) for _ in range(c.num_layers)
        )
        self.dropout = nn.Dropout(c.dropout)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        """(batch, seq, hidden) -> every layer's (batch, seq, hidden) output, bottom up."""
        outputs = []
        for index, lstm in enumerate(self.layers):
            h = self.dropout(lstm(x)[0])  # (batch, seq, hidden)
            # Paper: a residual link from the first to the second LSTM layer (not from the token layer).
            x = h + x if index > 0 else h
            outputs.append(x)
        return outputs


@dataclass
class ElmoOutput:
    """`hidden_states`: layer 0 the token representation twice, [x; x], then every biLSTM layer's
    [forward; backward], each (batch, seq, 2 * hidden), zero at padding. `forward_states` /
    `backward_states`: the top layer of each direction, (batch, seq, hidden), what the softmax reads."""

    hidden_states: tuple[torch.Tensor, ...]
    forward_states: torch.Tensor
    backward_states: torch.Tensor

    @property
    def last_hidden_state(self) -> torch.Tensor:
        """The top biLSTM layer's [forward; backward], (batch, seq, 2 * hidden): what a task reads by default."""
        return self.hidden_states[-1]


class Elmo(nn.Module):
    """Character CNN + separate forward and backward LSTM stacks + one softmax shared by both directions.

    `vocab` fills the character table (a buffer, saved with the weights); without it the table is zeros
    until `load_state_dict` fills it.

    As a task backbone (bertzoo.tasks.base.TaskModel) it is read feature-based, as the paper uses it: its
    layers are `ElmoOutput.hidden_states`, each `output_size` = 2 x hidden wide."""

    # No pooler and no [CLS] to give one: a sentence is the mean of its tokens' states. The last token's
    # forward half has read the sentence but its backward half only itself (the first token's the reverse).
    poolable = False
    auto_pooling = "mean"
    # The biLM's softmax serves pretraining alone; a task never runs it (and DDP must not wait for it).
    task_unused = ("softmax",)

    def __init__(self, config: ModelConfig, vocab: Sequence[str] | None = None) -> None:
        super().__init__()
        check_config(config)
        c = config
        self.config = config
        if vocab is not None and len(vocab) != c.vocab_size:
            raise ConfigError(
                f"the vocabulary has {len(vocab)} tokens, model.vocab_size={c.vocab_size}; make them agree"
            )
        chars = char_table(vocab, c.max_chars) if vocab is not None else torch.zeros(c.vocab_size, c.max_chars)
        self.register_buffer("char_ids", chars.long())  # (vocab, max_chars)
        self.token_encoder = CharCNN(c)
        self.forward_lstm = LSTMStack(c)
        self.backward_lstm = LSTMStack(c)
        # One Linear, so one weight and one bias, for both directions (the paper ties them).
        self.softmax = nn.Linear(c.hidden_size, c.vocab_size)

    @property
    def output_size(self) -> int:
        """Width of every layer it hands out: [forward; backward] (the token layer: [x; x])."""
        return 2 * self.config.hidden_size

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        *,
        output_hidden_states: bool = True,
    ) -> ElmoOutput:
        """(batch, seq) token ids of a right-padded batch (attention_mask 1 = real token). `token_type_ids`
        and `output_hidden_states` are the task code's encoder call: ELMo has no segments, and every layer
        is computed on the way up, so `hidden_states` is always there."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        mask = attention_mask.bool().unsqueeze(-1)  # (batch, seq, 1)
        lengths = attention_mask.long().sum(dim=1)  # (batch,)
        tokens = self.token_encoder(self.char_ids[input_ids])  # (batch, seq, hidden)
        forward = self.forward_lstm(tokens)  # num_layers x (batch, seq, hidden)
        backward = [reverse_padded(h, lengths) for h in self.backward_lstm(reverse_padded(tokens, lengths))]
        layers = [torch.cat([tokens, tokens], dim=-1)]
        layers += [torch.cat([f, b], dim=-1) for f, b in zip(forward, backward, strict=True)]
        # Padding states are what the LSTMs made of padding: zero them so no reader can depend on them.
        layers = [h.masked_fill(~mask, 0.0) for h in layers]
        return ElmoOutput(
            hidden_states=tuple(layers),
            forward_states=forward[-1].masked_fill(~mask, 0.0),
            backward_states=backward[-1].masked_fill(~mask, 0.0),
        )
