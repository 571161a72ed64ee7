"""Objectives take models and a batch and return a loss with metrics."""

from bertzoo.objectives.base import ObjectiveOutput
from bertzoo.objectives.clm import CausalLM
from bertzoo.objectives.mlm import MaskedLM

__all__ = ["CausalLM", "MaskedLM", "ObjectiveOutput"]
