"""Reading user files and values safely: every scenario, topology, Hugging Face config.json and calibration
profile comes in through here, so each refuses the same hostile input the same way (a `ScenarioError`,
exit 2, naming the file and what was wrong):

* bytes that are not UTF-8 text;
* YAML or JSON nested deeper than `MAX_DEPTH` (Python's parsers would die of RecursionError), and a YAML
  alias bomb is harmless because nothing here walks a shared node twice;
* a key given twice in one mapping (YAML and JSON both keep the last silently).

NaN and infinities (YAML's .nan / .inf, JSON's NaN / Infinity) are read as floats; `schema.py` refuses
them with the key path.

`short(value)` is the one way a message quotes a user's value: at most `QUOTE_CHARS` characters, built
without ever expanding the whole value (a billion-element alias bomb quotes in microseconds).
Neighbours: `schema.py` checks types and ranges of what was read, `errors.py` is the error.
"""
from __future__ import annotations

import json
import re
import reprlib
from pathlib import Path
from typing import Any

import yaml

from .errors import ScenarioError

QUOTE_CHARS = 60
"""Longest quote of a user's value in a message: enough to recognise it, short enough for one line."""
MAX_DEPTH = 32
"""Deepest nesting of mappings and lists accepted in an input file. The deepest real file (a topology)
nests 4 levels; Python's own parsers recurse and fail near 1,000."""
MAX_FILE_BYTES = 64 << 20
"""Largest input file read: the shipped calibration profile is ~100 KB, a scenario ~1 KB."""

_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxtuple, _REPR.maxdict = 2, 4, 4, 3
_REPR.maxstring, _REPR.maxlong, _REPR.maxother = QUOTE_CHARS, 40, QUOTE_CHARS


def spelling(name: str) -> str:
    """A name as compared with the names it may mean, whatever the case and separators a user wrote it with:
    lower-case ASCII letters and digits only (`Interleaved1F1B` and `interleaved-1f1b`, `Llama-3.1-8B` and
    `llama3.1-8b` compare equal). The schedule and model-preset aliases use it."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


def short(value: Any) -> str:
    """A repr of `value` of at most QUOTE_CHARS characters ('...' marks a cut), never expanding it whole."""
    try:
        text = _REPR.repr(value)
    except Exception:  # noqa: BLE001 (a value whose repr fails is still quoted by its type)
        text = f"<{type(value).__name__}>"
    return text if len(text) <= QUOTE_CHARS else text[: QUOTE_CHARS - 3] + "..."


def short_path(path) -> str:
    """A file name for a message: as given, cut in the middle past 200 characters."""
    text = str(path)
    return text if len(text) <= 200 else text[:97] + "..." + text[-100:]


def check_depth(value: Any, where: str, limit: int = MAX_DEPTH) -> Any:
    """`value` unchanged, or a ScenarioError if its mappings and lists nest deeper than `limit`. Each
    container is visited once (by identity), so an alias bomb's shared nodes cost one visit each."""
    seen: set[int] = set()
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if not isinstance(node, (dict, list, tuple)) or id(node) in seen:
            continue
        if depth > limit:
            raise ScenarioError(where, f"nested more than {limit} levels deep", f"at most {limit} levels of mappings and lists")
        seen.add(id(node))
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children)
    return value


def read_text(path: Path, where: str) -> str:
    """The file's text, or a ScenarioError naming it: unreadable, too large or not UTF-8."""
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ScenarioError(where, f"{path} is {size:,} bytes", f"at most {MAX_FILE_BYTES:,} bytes")
        data = path.read_bytes()
    except (OSError, ValueError) as e:
        raise ScenarioError(where, f"cannot read {short(str(path))}: {getattr(e, 'strerror', None) or e}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ScenarioError(where, f"{path} is not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})",
                            "a UTF-8 text file") from None


class StrictLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` (no tags that build Python objects) that refuses a key given twice in a mapping."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # keys merged in (<<) may be overridden, as YAML says
                key = self.construct_object(key_node, deep=deep)
                try:
                    duplicate = key in seen
                    seen.add(key)
                except TypeError:  # an unhashable key: SafeLoader's own error follows
                    continue
                if duplicate:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping", node.start_mark, f"found duplicate key {short(key)}", key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


def parse_yaml(text: str, where: str) -> Any:
    """YAML text -> plain data (safe tags only, duplicate keys refused, depth bounded)."""
    try:
        data = yaml.load(text, Loader=StrictLoader)  # noqa: S506 (StrictLoader is a SafeLoader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        raise ScenarioError(where, f"not valid YAML: {' '.join(str(e.problem or e.context).split())[:120]}{at}",
                            "YAML with safe tags and each key once") from None
    except yaml.YAMLError as e:
        raise ScenarioError(where, f"not valid YAML: {' '.join(str(e).split())[:120]}") from None
    except RecursionError:
        raise ScenarioError(where, "nested too deeply to parse", f"at most {MAX_DEPTH} levels of mappings and lists") from None
    return check_depth(data, where)


def read_yaml_file(path: Path, where: str) -> Any:
    return parse_yaml(read_text(path, where), where)


def _no_duplicates(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {short(k)}")
        out[k] = v
    return out


def parse_json(text: str, where: str) -> Any:
    """JSON text -> plain data (no duplicate keys; depth bounded). NaN and Infinity literals are read as
    floats, for the schema to refuse with the key path (`schema._convert`)."""
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as e:
        raise ScenarioError(where, f"not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    except ValueError as e:
        raise ScenarioError(where, f"not valid JSON: {e}") from None
    except RecursionError:
        raise ScenarioError(where, "nested too deeply to parse", f"at most {MAX_DEPTH} levels of objects and arrays") from None
    return check_depth(data, where)


def read_json_file(path: Path, where: str) -> Any:
    return parse_json(read_text(path, where), where)


def existing_file(spec: str, *candidates: Path) -> Path | None:
    """The first candidate that is an existing file; None when none is (a name with a NUL byte, or too
    long for the file system, is simply not a file)."""
    for c in candidates:
        try:
            if c.is_file():
                return c
        except (OSError, ValueError):
            continue
    return None


def near_even_split(total: int, parts: int) -> list[int]:
    """`total` items over `parts` slots as evenly as whole numbers allow, the larger shares in the middle and the
    smaller at both ends, the last end first (a pipeline's first and last chunks also hold the embedding and the LM
    head, the head the heavier): 61 layers over 32 chunks -> [1, 2 x 29, 1, 1], 80 over 3 -> [27, 27, 26]. A
    suggestion for `parallel.pp_layers` in an error message."""
    q, r = divmod(total, parts)
    front = (parts - r) // 2
    return [q] * front + [q + 1] * r + [q] * (parts - r - front)
