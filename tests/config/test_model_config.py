"""`ModelConfig` and the families' own config classes: a config.json written before each family had its own class
(one flat ModelConfig of every family's fields, format 1; the files in fixtures/ were written by that code) loads
into the family's class with every value it held, and a field of another family is refused unless it holds the
neutral value every format-1 file wrote for it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from bertzoo import io
from bertzoo.config import LEGACY_FIELDS, ModelConfig, saved_fields
from bertzoo.errors import ConfigError
from bertzoo.loading import load_encoder, read_config
from bertzoo.models.elmo import ElmoConfig
from bertzoo.models.encdec import EncoderDecoderConfig
from bertzoo.models.encoder import Encoder
from bertzoo.models.ernie_thu import ErnieThuConfig
from bertzoo.models.transfo_xl import TransfoXLConfig
from bertzoo.models.xlnet import XLNetConfig
from bertzoo.variants import VARIANTS

FIXTURES = Path(__file__).parent / "fixtures"
CLASSES = {
    "t5": EncoderDecoderConfig,
    "mass": EncoderDecoderConfig,
    "xlnet": XLNetConfig,
    "transfo-xl": TransfoXLConfig,
    "elmo": ElmoConfig,
    "ernie-thu": ErnieThuConfig,
}


def test_a_fixture_for_every_family() -> None:
    assert {p.stem for p in FIXTURES.glob("*.json")} == set(VARIANTS)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_a_format_1_config_json_loads_with_every_value(tmp_path, variant) -> None:
    raw = json.loads((FIXTURES / f"{variant}.json").read_text())
    assert raw["bertzoo_version"] == 1 and len(raw) == 50  # the flat format: every family's 49 fields
    (tmp_path / "config.json").write_text(json.dumps(raw))
    _, config, is_hf = read_config(tmp_path)
    assert not is_hf and type(config) is CLASSES.get(variant, ModelConfig)
    kept = config.to_dict()
    for key, value in raw.items():
        if key in kept:
            assert kept[key] == value, key
        else:  # dropped: the bertzoo_version marker, or another family's field at the neutral value
            assert key == "bertzoo_version" or LEGACY_FIELDS[key] == value, key


def test_the_family_fields_of_the_fixtures_are_read_not_defaulted(tmp_path) -> None:
    """The fixtures hold non-default family values; they must come back as written."""
    expected = {
        "xlnet": {"mem_len": 16, "reuse_len": 8, "clamp_len": 32, "same_length": True, "causal": True},
        "transfo-xl": {"mem_len": 32, "clamp_len": 64},
        "t5": {"num_decoder_layers": 2, "decoder_start_token_id": 0, "scale_decoder_outputs": True},
        "mass": {"num_decoder_layers": 2, "decoder_start_token_id": 4},
        "elmo": {
            "highway_layers": 2,
            "lstm_size": 4096,
            "char_filters": [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]],
        },
        "ernie-thu": {"knowledge_layers": 1},
    }
    for variant, fields in expected.items():
        (tmp_path / "config.json").write_text((FIXTURES / f"{variant}.json").read_text())
        config = read_config(tmp_path)[1]
        for key, value in fields.items():
            assert getattr(config, key) == value, (variant, key)


def test_legacy_defaults_are_the_family_classes_defaults() -> None:
    """LEGACY_FIELDS records what format 1 wrote for a family's field in any other family's model: the default
    of that field in its own class today."""
    defaults = {}
    for cls in set(CLASSES.values()):
        for f in dataclasses.fields(cls):
            if f.name not in {g.name for g in dataclasses.fields(ModelConfig)}:
                defaults[f.name] = f.default if f.default is not dataclasses.MISSING else f.default_factory()
    assert defaults == LEGACY_FIELDS


def test_a_field_of_another_family_with_a_real_value_is_one_line(tmp_path) -> None:
    raw = json.loads((FIXTURES / "bert.json").read_text())
    raw["mem_len"] = 5
    with pytest.raises(ConfigError, match=r"model.mem_len=5: a variant 'bert' model has no mem_len") as info:
        saved_fields(ModelConfig, raw)
    assert "\n" not in str(info.value)


def test_new_files_hold_only_their_class_fields(tmp_path) -> None:
    config = VARIANTS["bert"].model_config({"preset": "bert-tiny", "vocab_size": 50})
    Encoder(config).save_pretrained(tmp_path)
    written = json.loads((tmp_path / "config.json").read_text())
    assert written["bertzoo_version"] == 2 and "mem_len" not in written and "char_filters" not in written
    assert load_encoder(tmp_path).config == config


def test_a_format_1_model_directory_loads_its_weights(tmp_path) -> None:
    """A whole saved model of format 1 (config.json of every field + weights) loads into the family's model."""
    config = VARIANTS["xlnet"].model_config({"preset": "xlnet-tiny", "vocab_size": 120})
    encoder = VARIANTS["xlnet"].encoder_class(config)
    io.save_module(encoder, config, tmp_path)
    (tmp_path / "config.json").write_text((FIXTURES / "xlnet.json").read_text())  # the format-1 file
    loaded = load_encoder(tmp_path)
    assert type(loaded.config) is XLNetConfig and loaded.config.mem_len == 16
    for (name, a), (_, b) in zip(encoder.state_dict().items(), loaded.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
