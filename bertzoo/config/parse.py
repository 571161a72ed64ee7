"""Reading configs: YAML run files, JSON model files and dotted command-line overrides, into typed dataclasses.

Every loader goes through `from_dict`, which rejects unknown keys and wrong types with the dotted
key path and the allowed values in the message, so a typo never silently trains the wrong model.
"""

from __future__ import annotations

import dataclasses
import json
import re
import typing
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, get_origin

from bertzoo.errors import ConfigError

T = TypeVar("T")


def read_json(path: str | Path) -> dict[str, Any]:
    """Read a JSON object, turning the usual failures into one clear error."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}; check the path")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        raise ConfigError(f"{path} is not valid JSON ({exc}); fix or regenerate the file") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a JSON object at the top level")
    return data


def from_dict(cls: type[T], data: dict[str, Any], path: str = "") -> T:
    """Build dataclass `cls` from a plain dict, validating keys and types recursively."""
    if not isinstance(data, dict):
        raise ConfigError(f"{path or cls.__name__} must be a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(known), key=str)  # key=str: YAML keys may be numbers too
    if unknown:
        where = f"{path}." if path else ""
        raise ConfigError(
            f"unknown config key {where}{unknown[0]}; allowed keys under {path or 'the top level'}: "
            f"{', '.join(sorted(known))}"
        )
    kwargs = {name: _coerce(hints[name], value, f"{path}.{name}" if path else name) for name, value in data.items()}
    return cls(**kwargs)


def _coerce(tp: Any, value: Any, path: str) -> Any:
    origin = get_origin(tp)
    args = get_args(tp)
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        return from_dict(tp, value, path)
    if origin is typing.Union or (origin is not None and str(origin) == "<class 'types.UnionType'>"):
        if value is None and type(None) in args:
            return None
        last_error: ConfigError | None = None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(arg, value, path)
            except ConfigError as exc:
                last_error = exc
        raise last_error or ConfigError(f"{path}: invalid value {value!r}")
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{path}={value!r} is not allowed; choose one of: {', '.join(map(str, args))}")
        return value
    if origin in (dict, list) or tp is Any:
        expected = origin or object
        if tp is not Any and not isinstance(value, expected):
            raise ConfigError(f"{path} must be a {expected.__name__}, got {value!r}")
        # Elements are checked like fields (a list of sections becomes a list of dataclasses).
        if origin is list and args and args[0] is not Any:
            return [_coerce(args[0], v, f"{path}[{i}]") for i, v in enumerate(value)]
        if origin is dict and len(args) == 2 and args[1] is not Any:
            return {k: _coerce(args[1], v, f"{path}.{k}") for k, v in value.items()}
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{path} must be true or false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ConfigError(f"{path} must be an integer, got {value!r}")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                return float(value)
            except OverflowError:  # an integer beyond float range
                raise ConfigError(f"{path} is out of range for a number") from None
        if isinstance(value, str) and _FLOAT_LITERAL.fullmatch(value.strip()):
            # YAML 1.1 reads 1e-3 (no dot) as a string; everyone writes learning rates that way.
            return float(value)
        raise ConfigError(f"{path} must be a number, got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{path} must be a string, got {value!r}")
    return value


_FLOAT_LITERAL = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def parse_scalar(text: str) -> Any:
    """Parse a command-line override value the way YAML would (numbers, booleans, null, lists). An empty value is
    the empty string, as typed (`--model ''`: no checkpoint, random init), not YAML's null."""
    import yaml

    if text == "":
        return ""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def apply_overrides(data: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Set dotted keys (`train.lr`) in a nested dict; returns the same dict."""
    for dotted, value in overrides.items():
        node = data
        parts = dotted.split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"cannot override {dotted}: {part} is not a section")
            node = child
        node[parts[-1]] = value
    return data


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping with clear errors."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}; check the path (examples are in configs/)")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not UTF-8 text; save it as UTF-8") from None
    except yaml.YAMLError as exc:
        line = getattr(getattr(exc, "problem_mark", None), "line", None)
        where = f" at line {line + 1}" if line is not None else ""
        raise ConfigError(f"{path} is not valid YAML{where}; fix the syntax") from None
    except (ValueError, TypeError, RecursionError) as exc:  # e.g. a date like 2024-13-01, deep nesting
        raise ConfigError(f"{path} holds a value YAML cannot read ({exc}); fix the file") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping at the top level")
    return data


def is_number(value: Any) -> bool:
    """An int or float from a config, not a bool (YAML's `true` is an int to isinstance)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def to_plain(obj: Any) -> Any:
    """Dataclasses to nested dicts (for writing a run's resolved config)."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {k: to_plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    return obj
