"""Input embeddings: token + segment + absolute position (+ task), then LayerNorm and dropout."""

from __future__ import annotations

import torch
from torch import nn

from bertzoo.nn.positions import build_positions


class Embeddings(nn.Module):
    """BERT's input representation, with an optional projection for factorized embeddings (ALBERT).

    `embedding_size` may be smaller than `hidden_size`; a linear map then lifts the embeddings to
    the hidden width, which is what makes ALBERT's vocabulary table cheap. `task_type_vocab_size` > 0
    adds ERNIE 2.0's task embedding (one row per pretraining task), summed like the segment one.
    `norm=False` leaves the sum unnormalised (GPT); `pad_token_id=None` gives the table no padding row.
    """

    def __init__(
        self,
        vocab_size: int,
        hidden_size: int,
        *,
        embedding_size: int | None = None,
        max_position: int = 512,
        type_vocab_size: int = 2,
        task_type_vocab_size: int = 0,
        position: str = "learned",
        position_offset: int = 0,
        pad_token_id: int | None = 0,
        dropout: float = 0.1,
        layer_norm_eps: float = 1e-12,
        norm: bool = True,
    ) -> None:
        super().__init__()
        width = embedding_size or hidden_size
        self.word = nn.Embedding(vocab_size, width, padding_idx=pad_token_id)
        self.position = build_positions(position, max_position + position_offset, width)
        self.position_offset = position_offset
        self.token_type = nn.Embedding(type_vocab_size, width) if type_vocab_size > 0 else None
        self.task_type = nn.Embedding(task_type_vocab_size, width) if task_type_vocab_size > 0 else None
        self.norm = nn.LayerNorm(width, eps=layer_norm_eps) if norm else None
        self.dropout = nn.Dropout(dropout)
        self.project = nn.Linear(width, hidden_size) if width != hidden_size else None

    @property
    def max_position(self) -> int:
        """Longest sequence the position table covers."""
        if self.position is None:
            return 1 << 62
        return self.position.max_position - self.position_offset

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        task_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """input_ids: (batch, seq) -> (batch, seq, hidden). `task_type_ids` (batch, seq) default to task 0."""
        x = self.word(input_ids)  # (batch, seq, width)
        if self.position is not None:
            if position_ids is None:
                seq = input_ids.size(1)
                if seq > self.max_position:
                    raise ValueError(
                        f"sequence length {seq} exceeds the position table ({self.max_position}); "
                        "truncate inputs or use a model with a larger max_position"
                    )
                position_ids = torch.arange(seq, device=input_ids.device)[None] + self.position_offset
            x = x + self.position(position_ids)
        if self.token_type is not None:
            if token_type_ids is None:
                # Row 0 of the segment table, without materialising a zero id tensor.
                x = x + self.token_type.weight[0]
            else:
                x = x + self.token_type(token_type_ids)
        if self.task_type is not None:
            x = x + (self.task_type.weight[0] if task_type_ids is None else self.task_type(task_type_ids))
        if self.norm is not None:
            x = self.norm(x)
        x = self.dropout(x)
        if self.project is not None:
            x = self.project(x)
        return x
