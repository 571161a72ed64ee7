"""Model parts shared by every variant. No variant name appears here."""

from bertzoo.nn.attention import CrossAttention, SelfAttention, attend
from bertzoo.nn.embeddings import Embeddings
from bertzoo.nn.ffn import FeedForward, activation
from bertzoo.nn.kv_cache import KVCache, LayerCache
from bertzoo.nn.layer import LayerOutput, Residual, TransformerLayer
from bertzoo.nn.masks import (
    causal_attention_mask,
    causal_mask,
    combine,
    masked_mean,
    padding_mask,
    prefix_lm_mask,
    to_attention_mask,
)
from bertzoo.nn.norm import RMSNorm, build_norm
from bertzoo.nn.positions import LearnedPositions, SinusoidalPositions, build_positions, sinusoid_table
from bertzoo.nn.relative import RelativePositionBias, relative_position_bucket
from bertzoo.nn.stack import TransformerStack, enable_activation_checkpointing

__all__ = [
    "CrossAttention",
    "Embeddings",
    "FeedForward",
    "KVCache",
    "LayerCache",
    "LayerOutput",
    "LearnedPositions",
    "RMSNorm",
    "RelativePositionBias",
    "Residual",
    "SelfAttention",
    "SinusoidalPositions",
    "TransformerLayer",
    "TransformerStack",
    "activation",
    "attend",
    "build_norm",
    "build_positions",
    "enable_activation_checkpointing",
    "masked_mean",
    "causal_attention_mask",
    "causal_mask",
    "combine",
    "padding_mask",
    "prefix_lm_mask",
    "relative_position_bucket",
    "sinusoid_table",
    "to_attention_mask",
]
