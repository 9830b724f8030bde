"""`--set dotted.key=value` overrides of a scenario mapping: each value read as YAML (safe_load), applied before
the scenario is validated; a preset model or a framework given by name is expanded so one of its fields can be
set."""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from .errors import ScenarioError
from .frameworks.spec import DEFAULT_FRAMEWORK
from .inputs import MAX_DEPTH, parse_yaml, short
from .model import load_model, model_to_mapping


def parse_override(text: str) -> tuple[list[str], Any]:
    """'parallel.tp=4' -> (['parallel', 'tp'], 4); the value is read as YAML (safe_load)."""
    if "=" not in text:
        raise ScenarioError("--set", f"{short(text)} is not KEY=VALUE", "dotted.key=value, e.g. parallel.tp=4")
    key, _, value = text.partition("=")
    parts = [p for p in key.strip().split(".")]
    if not all(parts) or len(parts) > MAX_DEPTH:
        raise ScenarioError("--set", f"bad key {short(key)}", "dotted.key=value")
    try:
        parsed = parse_yaml(value, f"--set {short(key)}") if value.strip() else None
    except ScenarioError as e:
        if "nested" in e.problem or "duplicate" in e.problem:
            raise
        parsed = value  # not YAML: the text itself (a string key takes it; any other refuses it by type)
    return parts, parsed


def apply_overrides(raw: dict, overrides: list[str], base_dir: Path | None) -> dict:
    raw = copy.deepcopy(raw)
    for text in overrides:
        parts, value = parse_override(text)
        node = raw
        for i, key in enumerate(parts[:-1]):
            if key == "model" and i == 0 and isinstance(node.get("model"), str):
                # overriding a field of a preset: expand the preset to the contract mapping first
                node["model"] = model_to_mapping(load_model(node["model"], base_dir))
            if key == "framework" and i == 0 and not isinstance(node.get("framework"), dict):
                # setting an option of a framework given by name (or of the default one)
                node["framework"] = {"name": node.get("framework") or DEFAULT_FRAMEWORK}
            child = node.get(key)
            if child is None:
                child = node[key] = {}
            if not isinstance(child, dict):
                raise ScenarioError(".".join(parts[: i + 1]), f"is {short(child)}, not a mapping; cannot set {short(text)}")
            node = child
        node[parts[-1]] = value
    return raw


def override_keys(overrides: list[str]) -> tuple[set[str], frozenset[str]]:
    """(the dotted keys the overrides set, the framework options they set by name: `framework.<option>=...` or
    within a `framework={...}` mapping), for `resolve.drop_options_setting`."""
    parsed = [parse_override(o) for o in overrides]
    options = {path[1] for path, _ in parsed if len(path) == 2 and path[0] == "framework"}
    options |= {k for path, value in parsed if path == ["framework"] and isinstance(value, dict) for k in value}
    return {".".join(path) for path, _ in parsed}, frozenset(options)
