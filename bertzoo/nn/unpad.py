"""Unpadded execution: a batch's real tokens concatenated into one (tokens, hidden) tensor.

Embeddings, projections, feed-forwards and norms act on each token alone, so on packed tokens they skip the
padding's work entirely; only attention needs to know which tokens belong together, and `Packing.attend`
runs it over each sequence's own tokens with no mask, which lets SDPA take its fused kernels.

Attention backends (`backend`):
- "split": one SDPA call per sequence on a slice of the packed tokens. Fastest on the CPU (its fused
  kernel takes no mask; measured against the two others, docs/performance.md).
- "nested": torch's jagged nested tensors (`torch.nested.nested_tensor_from_jagged`) through SDPA, one call
  for the batch; SDPA's varlen flash / memory-efficient kernels on CUDA.
- "padded": the tokens re-padded for attention alone, with the padding mask.
"auto" is "nested" on CUDA; on the CPU "split" without autograd (inference) and "padded" with it (training).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
import torch.nn.functional as F

BACKENDS = ("auto", "split", "nested", "padded")


@dataclass(frozen=True)
class Packing:
    """Where a padded batch's real tokens are: built once per forward pass, shared by every layer."""

    indices: torch.Tensor  # (tokens,) flat positions of the real tokens in (batch * seq)
    offsets: torch.Tensor  # (sequences + 1,) cumulative sequence lengths (cu_seqlens), int64
    lengths: tuple[int, ...]  # real tokens of each sequence (a row, or a document of a row), on the host
    batch: int
    seq: int
    backend: str = "split"
    # Only these packed tokens ask (the top layer of a [CLS] classifier): attention still reads every key, the
    # layer returns (len(queries), hidden). None: every token.
    queries: torch.Tensor | None = None

    @classmethod
    def from_mask(
        cls, attention_mask: torch.Tensor, backend: str = "auto", document_ids: torch.Tensor | None = None
    ) -> Packing:
        """From a (batch, seq) 1/0 or bool padding mask (real tokens anywhere in a row, usually first).
        `document_ids` (batch, seq): several documents packed in a row, contiguous; each is then its own sequence
        (attention stays inside it)."""
        if backend not in BACKENDS:
            raise ValueError(f"unpad backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        if backend == "auto":
            # CPU: per-sequence calls are fastest forward only; under autograd their many small backward
            # kernels cost more than re-padding for attention (measured, docs/performance.md).
            backend = "nested" if attention_mask.is_cuda else ("padded" if torch.is_grad_enabled() else "split")
        real = attention_mask.bool()
        indices = real.flatten().nonzero().squeeze(1)
        if document_ids is None:
            lengths = real.sum(dim=1)
        else:
            # A sequence starts where the row or the document changes.
            row, doc = indices // real.size(1), document_ids.flatten()[indices]
            start = torch.ones_like(indices, dtype=torch.bool)
            start[1:] = (row[1:] != row[:-1]) | (doc[1:] != doc[:-1])
            lengths = torch.diff(F.pad(start.nonzero().squeeze(1), (0, 1), value=indices.numel()))
        offsets = F.pad(lengths.cumsum(0), (1, 0))
        return cls(indices, offsets, tuple(lengths.tolist()), real.size(0), real.size(1), backend)

    @property
    def tokens(self) -> int:
        """Number of real tokens in the batch."""
        return int(self.indices.numel())

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, seq, ...) -> (tokens, ...): the real positions, row after row."""
        return x.reshape(self.batch * self.seq, *x.shape[2:]).index_select(0, self.indices)

    def unpack(self, x: torch.Tensor) -> torch.Tensor:
        """(tokens, ...) -> (batch, seq, ...), zeros at the padding."""
        out = x.new_zeros(self.batch * self.seq, *x.shape[1:]).index_copy(0, self.indices, x)
        return out.view(self.batch, self.seq, *x.shape[1:])

    def starts_rows(self) -> bool:
        """Whether every sequence starts at position 0 of its row (right padding, one sequence a row)."""
        return len(self.lengths) == self.batch and bool((self.indices[self.offsets[:-1]] % self.seq == 0).all())

    def first_only(self) -> Packing:
        """This packing with each sequence's first token as its only query."""
        return dataclasses.replace(self, queries=self.offsets[:-1])

    def attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0, scale: float | None = None
    ) -> torch.Tensor:
        """Bidirectional attention within each sequence. q, k, v: (tokens, heads, head_dim) -> the same, or
        (len(queries), heads, head_dim) when `queries` is set."""
        if self.queries is not None:
            return self._attend_first(q, k, v, dropout_p, scale)
        if self.backend == "nested":
            nested = [
                torch.nested.nested_tensor_from_jagged(t.contiguous(), self.offsets).transpose(1, 2) for t in (q, k, v)
            ]
            out = F.scaled_dot_product_attention(*nested, dropout_p=dropout_p, scale=scale)
            return out.transpose(1, 2).values()
        if self.backend == "padded":
            return self._repadded(q, k, v, dropout_p, scale)
        outs = []
        start = 0
        for n in self.lengths:
            if n == 0:
                continue
            # (1, heads, n, head_dim) views of this sequence's tokens; no mask: SDPA's fused kernel.
            part = [t[start : start + n].transpose(0, 1)[None] for t in (q, k, v)]
            outs.append(F.scaled_dot_product_attention(*part, dropout_p=dropout_p, scale=scale)[0].transpose(0, 1))
            start += n
        return torch.cat(outs) if outs else q.new_zeros(q.shape)

    def _attend_first(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float, scale: float | None
    ) -> torch.Tensor:
        """One query per sequence: its keys and values re-padded per sequence, one SDPA call with the padding
        mask (cheap: a single query row each)."""
        whole = dataclasses.replace(self, queries=None)
        n, longest = len(self.lengths), max(self.lengths, default=0)
        lengths = torch.diff(self.offsets)
        sequence = torch.repeat_interleave(torch.arange(n, device=q.device), lengths)  # (tokens,)
        slot = sequence * longest + torch.arange(q.size(0), device=q.device) - self.offsets[sequence]
        keys, values = (whole._pad(t, slot, n, longest).transpose(1, 2) for t in (k, v))  # (n, heads, longest, dim)
        mask = (torch.arange(longest, device=q.device)[None] < lengths[:, None])[:, None, None]
        query = q.index_select(0, self.queries)[:, :, None]  # (n, heads, 1, dim)
        out = F.scaled_dot_product_attention(query, keys, values, attn_mask=mask, dropout_p=dropout_p, scale=scale)
        return out[:, :, 0]

    @staticmethod
    def _pad(t: torch.Tensor, slot: torch.Tensor, n: int, longest: int) -> torch.Tensor:
        return t.new_zeros(n * longest, *t.shape[1:]).index_copy(0, slot, t).view(n, longest, *t.shape[1:])

    def _repadded(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float, scale: float | None
    ) -> torch.Tensor:
        """Each sequence re-padded to the longest one for attention alone, with the padding mask."""
        n, longest = len(self.lengths), max(self.lengths, default=0)
        lengths = torch.diff(self.offsets)
        sequence = torch.repeat_interleave(torch.arange(n, device=q.device), lengths)  # (tokens,)
        slot = sequence * longest + torch.arange(q.size(0), device=q.device) - self.offsets[sequence]

        def pad(t: torch.Tensor) -> torch.Tensor:
            return t.new_zeros(n * longest, *t.shape[1:]).index_copy(0, slot, t).view(n, longest, *t.shape[1:])

        mask = (torch.arange(longest, device=q.device)[None] < lengths[:, None])[:, None, None]  # (n, 1, 1, key)
        out = F.scaled_dot_product_attention(
            *(pad(t).transpose(1, 2) for t in (q, k, v)), attn_mask=mask, dropout_p=dropout_p, scale=scale
        )
        return out.transpose(1, 2).reshape(n * longest, *q.shape[1:]).index_select(0, slot)


def tracing() -> bool:
    """Whether the model is being traced or compiled: unpadding reads lengths on the host and would bake the
    example batch into the graph, so such runs keep the padded path."""
    return torch.jit.is_tracing() or torch.compiler.is_compiling() or torch.onnx.is_in_onnx_export()
