"""bertzoo: the BERT family of pretrained language models in one codebase."""

# `loading` gives the model classes from_pretrained / save_pretrained (they sit a layer below files);
# importing any part of bertzoo runs this package first, so the methods are always there.
from bertzoo import loading  # noqa: F401
from bertzoo.batch import IGNORE_INDEX, Batch
from bertzoo.config import MaskingConfig, ModelConfig, PretrainConfig, TrainConfig
from bertzoo.errors import BertzooError, CheckpointError, ConfigError, DataError
from bertzoo.models.encoder import Encoder, EncoderOutput
from bertzoo.objectives import MaskedLM, ObjectiveOutput

__version__ = "0.1.0"

__all__ = [
    "IGNORE_INDEX",
    "Batch",
    "BertzooError",
    "CheckpointError",
    "ConfigError",
    "DataError",
    "Encoder",
    "EncoderOutput",
    "MaskedLM",
    "MaskingConfig",
    "ModelConfig",
    "ObjectiveOutput",
    "PretrainConfig",
    "TrainConfig",
    "__version__",
]
