"""bertzoo: the BERT family of pretrained language models in one codebase."""

from bertzoo.batch import IGNORE_INDEX, Batch
from bertzoo.config import MaskingConfig, ModelConfig, PretrainConfig, TrainConfig
from bertzoo.errors import BertzooError, CheckpointError, ConfigError, DataError
from bertzoo.model import Encoder, EncoderOutput
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
