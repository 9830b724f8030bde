"""Reading a calibration profile: the JSON file validated strictly into a `Profile` (`profile.py`), read once per
process and text, and whether it was measured on the scenario's GPU.

`load_profile(path)` for a file, `profile_from_mapping(raw)` for a parsed object, `profile_warnings(sc, prof)` for
the report (a mismatch is an error unless the scenario allows it)."""
from __future__ import annotations

import hashlib
import math
from pathlib import Path

from ..errors import ScenarioError
from ..inputs import existing_file, parse_json, read_text, short_path
from ..schema import from_mapping
from .profile import Profile, attention_work
from .profile_schema import MAX_DEVICE_FLOPS, MIN_TIME_S, SCHEMA_VERSION


def profile_from_mapping(raw, where: str = "profile") -> Profile:
    """Validate a parsed profile strictly (unknown keys, types, ranges, version) and build it."""
    if not isinstance(raw, dict):
        raise ScenarioError(where, f"a calibration profile must be a JSON object, got {type(raw).__name__}")
    version = raw.get("schema_version")
    if version is None:
        raise ScenarioError(where, "missing schema_version: not a clustersim calibration profile")
    if version != SCHEMA_VERSION:
        raise ScenarioError(where, f"schema_version {version!r} is not supported by this clustersim",
                            f"{SCHEMA_VERSION}; re-run python -m calibrate")
    try:
        prof = from_mapping(Profile, raw, "")
    except ScenarioError as e:
        raise ScenarioError(where, f"{e.path}: {e.problem}", e.allowed) from None
    for table in ("gemm", "attention", "elementwise", "host_device", "optimizer", "framework", "collectives"):
        for i, p in enumerate(getattr(prof, table)):
            if not p.time_s >= MIN_TIME_S:
                raise ScenarioError(where, f"{table}[{i}].time_s: {p.time_s!r} is not a time a kernel takes", f">= {MIN_TIME_S:g} s")
            if p.mean_s is not None and not (p.mean_s > 0 and math.isfinite(p.mean_s)):
                raise ScenarioError(where, f"{table}[{i}].mean_s: {p.mean_s!r} is not a positive time")
            if not p.p10_s <= p.time_s * (1 + 1e-9) or not p.time_s <= p.p90_s * (1 + 1e-9):
                raise ScenarioError(where, f"{table}[{i}]: expected p10_s <= time_s <= p90_s, got "
                                           f"{p.p10_s!r}, {p.time_s!r}, {p.p90_s!r}")
    for table, work in (("gemm", lambda p: 2.0 * p.m * p.n * p.k),
                        ("attention", lambda p: attention_work(p.batch_heads, p.s_q, p.s_kv, 0.5 if p.causal else 1.0)
                         * 4 * p.d_head * (2.5 if p.phase == "bwd" else 1.0))):
        for i, p in enumerate(getattr(prof, table)):
            rate = work(p) / min(p.time_s, p.cost_s)
            if rate > MAX_DEVICE_FLOPS:
                raise ScenarioError(where, f"{table}[{i}]: {rate:.3g} FLOP/s, faster than any device",
                                    f"at most {MAX_DEVICE_FLOPS:g} FLOP/s (times too small)")
    return prof


def profile_mismatch(prof: Profile, topology) -> str | None:
    """Why `prof` was not measured on `topology`'s GPU (None when it was, or cannot be told): the profile's
    `spec` names the topology GPU calibrate matched the device to; without one, a CPU profile fits only
    a host (gloo) topology."""
    dev = prof.provenance
    if prof.spec is not None:
        if prof.spec.gpu_name != topology.gpu.name:
            return (f"profile measured on {dev.device_type} {dev.device_name!r} ({prof.spec.gpu_name}), "
                    f"but topology {topology.name} has {topology.gpu.name}")
        return None
    host = topology.node.interconnect == "host"
    if (dev.device_type == "cpu") != host:
        return f"profile measured on {dev.device_type} {dev.device_name!r}, but topology {topology.name} has {topology.gpu.name}"
    return None


def profile_warnings(sc, prof: Profile | None) -> list[str]:
    """The report's warnings about `sc`'s profile; a mismatch is a ScenarioError unless the scenario
    allows it (`cluster.allow_profile_mismatch`, `run --allow-profile-mismatch`)."""
    if prof is None:
        return []
    why = profile_mismatch(prof, sc.topology)
    if why is None:
        return []
    if not sc.cluster.allow_profile_mismatch:
        raise ScenarioError("cluster.profile", why, "a profile of the topology's GPU, or --allow-profile-mismatch")
    return [f"{why}: its times price another device (allowed by --allow-profile-mismatch)"]


_LOADED: dict[tuple[str, str], Profile] = {}
"""Profiles read in this process, by (path as given, the text's hash): a sweep or `validate --profile` prices
hundreds of scenarios from one file, and converting a full GPU sweep's thousands of points took most of each one's
time. A Profile is frozen, so the runs share it; a file whose text changed is converted again."""


def load_profile(path: str | Path) -> Profile:
    """Read and validate a calibration profile; a bad file is a ScenarioError naming it and the problem."""
    path = Path(path)
    where = f"cluster.profile {short_path(path)}"
    if existing_file(str(path), path) is None:
        raise ScenarioError(where, "cannot read the calibration profile: no such file",
                            "default, or a file written by python -m calibrate")
    text = read_text(path, where)
    key = (str(path), hashlib.blake2b(text.encode(), digest_size=16).hexdigest())
    if key not in _LOADED:
        prof = profile_from_mapping(parse_json(text, where), where)
        object.__setattr__(prof, "source", str(path))
        _LOADED[key] = prof
    return _LOADED[key]
