"""Strict conversion of a YAML mapping into a frozen dataclass: unknown keys, wrong types and values
outside a field's allowed set are `ScenarioError`s that name the key path.

A field declares its allowed values with `metadata={"choices": (...)}` or a lower bound with
`metadata={"min": x}`; `Optional[...]` admits null; nested dataclasses are converted recursively.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

from .errors import ScenarioError

_TYPE_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def _describe(tp) -> str:
    if tp in _TYPE_NAMES:
        return _TYPE_NAMES[tp]
    origin = typing.get_origin(tp)
    if origin in (list, tuple):
        return "a list"
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    return str(tp)


def _convert(value: Any, tp, path: str):
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        errors = []
        for a in inner:
            try:
                return _convert(value, a, path)
            except ScenarioError as e:
                errors.append(e)
        raise errors[0]
    if tp is typing.Any:
        return value
    if dataclasses.is_dataclass(tp):
        return from_mapping(tp, value, path)
    if origin in (list, tuple):
        (item,) = typing.get_args(tp)[:1] or (typing.Any,)
        if not isinstance(value, list):
            raise ScenarioError(path, f"expected a list, got {value!r}")
        out = [_convert(v, item, f"{path}[{i}]") for i, v in enumerate(value)]
        return tuple(out) if origin is tuple else out
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ScenarioError(path, f"expected a mapping, got {value!r}")
        _, vt = typing.get_args(tp) or (str, typing.Any)
        if vt is typing.Any:
            return dict(value)
        return {str(k): _convert(v, vt, f"{path}.{k}") for k, v in value.items()}
    if tp is bool:
        if not isinstance(value, bool):
            raise ScenarioError(path, f"expected true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise ScenarioError(path, f"expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ScenarioError(path, f"expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ScenarioError(path, f"expected a string, got {value!r}")
        return value
    raise TypeError(f"schema: unsupported field type {tp!r} at {path}")


def from_mapping(cls, raw: Any, path: str = ""):
    """Build dataclass `cls` from `raw` (a dict), strictly. `path` is the dotted key path for messages."""
    where = path or "scenario"
    if not isinstance(raw, dict):
        raise ScenarioError(where, f"expected a mapping, got {type(raw).__name__} {raw!r}"[:200])
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = [k for k in raw if k not in fields]
    if unknown:
        key = unknown[0]
        raise ScenarioError(f"{path}.{key}" if path else str(key), "unknown key", ", ".join(sorted(fields)))
    kwargs = {}
    for name, f in fields.items():
        key_path = f"{path}.{name}" if path else name
        if name not in raw:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ScenarioError(key_path, "missing required key")
            continue
        value = _convert(raw[name], hints[name], key_path)
        choices = f.metadata.get("choices")
        if choices is not None and value is not None and value not in choices:
            raise ScenarioError(key_path, f"{value!r} is not allowed", " | ".join(map(str, choices)))
        low = f.metadata.get("min")
        if low is not None and value is not None and value < low:
            raise ScenarioError(key_path, f"{value!r} is below the minimum", f">= {low}")
        kwargs[name] = value
    return cls(**kwargs)


def to_mapping(obj) -> dict:
    """The inverse of `from_mapping` (dataclass -> plain dict, tuples as lists)."""
    out = {}
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if dataclasses.is_dataclass(v):
            v = to_mapping(v)
        elif isinstance(v, tuple):
            v = list(v)
        out[f.name] = v
    return out
