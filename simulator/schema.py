"""Strict conversion of a YAML mapping into a frozen dataclass: unknown keys, wrong types and values
outside a field's allowed set are `ScenarioError`s that name the key path.

A field declares its allowed values with `metadata={"choices": (...)}` (and with `"not_modelled": {word: why}`, the word
as `inputs.spelling` writes it, what a refused word that names something real means), bounds with `metadata={"min": x}`,
`{"gt": x}` (strictly above) and `{"max": x}` (each upper bound says in the field's docstring why it is
there: a value beyond it would exhaust memory or time, or is physically absurd); `Optional[...]` admits
null; nested dataclasses are converted recursively. Numbers must be finite (NaN passes every `<` test, so
it is refused before any), strings at most `MAX_STR` characters, and a message quotes a value through
`inputs.short`, never whole (a YAML alias bomb expands to gigabytes).
"""
from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from typing import Any

from .errors import ScenarioError
from .inputs import short, spelling

MAX_STR = 8192
"""Longest string field (names, paths, provenance lines): far above any real one, small enough to print."""

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
            raise ScenarioError(path, f"expected a list, got {short(value)}")
        out = [_convert(v, item, f"{path}[{i}]") for i, v in enumerate(value)]
        return tuple(out) if origin is tuple else out
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ScenarioError(path, f"expected a mapping, got {short(value)}")
        _, vt = typing.get_args(tp) or (str, typing.Any)
        if vt is typing.Any:
            return dict(value)
        return {str(k): _convert(v, vt, f"{path}.{k}") for k, v in value.items()}
    if tp is bool:
        if not isinstance(value, bool):
            raise ScenarioError(path, f"expected true or false, got {short(value)}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise ScenarioError(path, f"expected an integer, got {short(value)}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ScenarioError(path, f"expected a number, got {short(value)}")
        try:
            out = float(value)
        except OverflowError:  # an integer beyond float range (10**400)
            raise ScenarioError(path, f"{short(value)} is not a finite number", "a finite number") from None
        if not math.isfinite(out):
            raise ScenarioError(path, f"{short(value)} is not a finite number", "a finite number (no .nan or .inf)")
        return out
    if tp is str:
        if not isinstance(value, str):
            raise ScenarioError(path, f"expected a string, got {short(value)}")
        if len(value) > MAX_STR:
            raise ScenarioError(path, f"a string of {len(value):,} characters", f"at most {MAX_STR:,}")
        return value
    raise TypeError(f"schema: unsupported field type {tp!r} at {path}")


def check_range(value, meta, path: str) -> None:
    """The field metadata's choices, min, gt and max, on a converted value (None passes)."""
    if value is None:
        return
    choices = meta.get("choices")
    if choices is not None and value not in choices:
        why = meta.get("not_modelled", {}).get(spelling(value)) if isinstance(value, str) else None  # a known word for something not modelled
        raise ScenarioError(path, f"{short(value)} is not allowed" + (f": {why}" if why else ""), " | ".join(map(str, choices)))
    low, gt, high = meta.get("min"), meta.get("gt"), meta.get("max")
    if low is not None and value < low:
        raise ScenarioError(path, f"{short(value)} is below the minimum", f">= {low}" + (f" and <= {high:,}" if high is not None else ""))
    if gt is not None and not value > gt:
        raise ScenarioError(path, f"{short(value)} is not above {gt}", f"> {gt}" + (f" and <= {high:,}" if high is not None else ""))
    if high is not None and value > high:
        why = meta.get("why")
        raise ScenarioError(path, f"{short(value)} is above the maximum {high:,}" + (f" ({why})" if why else ""),
                            f"<= {high:,}")


@functools.cache
def _schema(cls) -> tuple[dict, dict]:
    """(type hints, init fields by name) of dataclass `cls`, once per class: resolving the string annotations
    (`typing.get_type_hints`) was most of the time of reading a calibration profile's thousands of points."""
    return typing.get_type_hints(cls), {f.name: f for f in dataclasses.fields(cls) if f.init}


def from_mapping(cls, raw: Any, path: str = ""):
    """Build dataclass `cls` from `raw` (a dict), strictly. `path` is the dotted key path for messages."""
    where = path or "scenario"
    if not isinstance(raw, dict):
        raise ScenarioError(where, f"expected a mapping, got {type(raw).__name__} {short(raw)}")
    hints, fields = _schema(cls)
    unknown = [k for k in raw if k not in fields]
    if unknown:
        key = unknown[0]
        name = key if isinstance(key, str) and len(key) <= 60 else short(key)
        raise ScenarioError(f"{path}.{name}" if path else str(name), "unknown key", ", ".join(sorted(fields)))
    kwargs = {}
    for name, f in fields.items():
        key_path = f"{path}.{name}" if path else name
        if name not in raw:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                choices = f.metadata.get("choices")
                raise ScenarioError(key_path, "missing required key", " | ".join(map(str, choices)) if choices else None)
            continue
        value = _convert(raw[name], hints[name], key_path)
        if isinstance(value, str) and "alias" in f.metadata:
            value = f.metadata["alias"](value)  # another spelling of a choice, read as the choice
        check_range(value, f.metadata, key_path)
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
