"""Transformer-XL's training objective: a causal LM read in segments, each carrying the memory of the ones
before it (Dai et al. 2019, section 3.2).

A training example is a block of contiguous text (`data.max_seq_len` tokens). The block is cut into segments of
`segment_len`; segment k runs with the memory left by segments < k (detached: gradients stay inside a segment),
and every position predicts the next token, including across a segment boundary (the last token of segment k
predicts the first of k + 1, as in the paper's data iterator). The loss is the mean over all predicted tokens
of the block.

Why blocks rather than the paper's single stream carried across optimizer steps: the memory then lives inside
one example, so batches can be shuffled, split across processes and resumed exactly like every other
objective's, at the cost of an empty memory at the start of each block (the first segment of a block sees
only itself, as the first segment of the paper's stream does). Evaluation reads the dev split as long streams
(`bertzoo.models.transfo_xl.stream_nll`) with any memory length.

`memory=False` is the baseline without recurrence: the same segments, each on its own (a vanilla Transformer
LM with a context of `segment_len`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from bertzoo.batch import Batch
from bertzoo.errors import ConfigError
from bertzoo.models.transfo_xl import TransfoXL
from bertzoo.objectives.base import ObjectiveOutput
from bertzoo.objectives.clm import next_token_counts, next_token_output

__all__ = ["RecurrentLM"]


class RecurrentLM(nn.Module):
    """loss = mean next-token cross-entropy over a block read in segments with Transformer-XL memory."""

    # Scored like a causal LM (every next token), so the held-out unigram baseline is the next-token one.
    predicts_next_token = True

    def __init__(self, model: TransfoXL, segment_len: int = 64, memory: bool = True) -> None:
        super().__init__()
        if isinstance(segment_len, bool) or not isinstance(segment_len, int) or segment_len < 1:
            raise ConfigError(f"objective_args.segment_len must be a positive integer, got {segment_len!r}")
        if not isinstance(memory, bool):
            raise ConfigError(f"objective_args.memory must be true or false, got {memory!r}")
        if memory and model.config.mem_len < 1:
            raise ConfigError(
                "a Transformer-XL trained with recurrence needs model.mem_len >= 1 (0 keeps no memory); "
                "set model.mem_len (e.g. to objective_args.segment_len) or objective_args.memory=false"
            )
        self.encoder = model
        self.segment_len = segment_len
        self.memory = memory

    @property
    def config(self):
        return self.encoder.config

    def hidden_states(self, input_ids: torch.Tensor) -> torch.Tensor:
        """(batch, seq, hidden): the block's top-layer states, segment after segment."""
        mems, hidden = None, []
        for segment in input_ids.split(self.segment_len, dim=1):
            out = self.encoder(segment, mems if self.memory else None, with_logits=False)
            mems = out.mems
            hidden.append(out.last_hidden_state)
        return torch.cat(hidden, dim=1)

    def loss_counts(self, batch: Batch) -> dict[str, int]:
        """Items each loss term averages over (host-side, before the forward): see ObjectiveOutput."""
        return next_token_counts(batch)

    def forward(self, batch: Batch) -> ObjectiveOutput:
        return next_token_output(self.hidden_states(batch.input_ids), batch, self.encoder.lm_logits)

    def checkpoint_fields(self) -> dict[str, Any]:
        """What config.json needs beyond the ModelConfig to rebuild this module (`save_pretrained`)."""
        return {"objective": "clm", "segment_len": self.segment_len, "memory": self.memory}
