"""The scenario's `run:` section: how many tokens, in which phases, with which checkpoint and failure
settings. Plain frozen dataclasses read strictly (unknown keys are errors that name the key path).

    run:
      tokens: 15T                     # or phases (each with its own tokens), not both
      phases:                         # batch-size ramps, long-context extension
        - {tokens: 14.8T, seq_len: 8192}
        - {tokens: 0.8T, seq_len: 131072, set: [parallel.cp=16]}
      checkpoint: {interval_s: null, async: false}
      failures_per_gpu_hour: null     # null = failures.DEFAULT_FAILURES_PER_GPU_HOUR
      price_per_gpu_hour: null        # null = price.list_price for the topology's GPU

`training.tokens` is read as `run.tokens` (scenario.py moves it here).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Optional

from .errors import ScenarioError
from .schema import from_mapping

SUFFIXES = {"": 1.0, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}
"""Token-count suffixes: K, M, B (= G), T, powers of 1000."""


def parse_tokens(value: Any, path: str) -> float:
    """'15T' -> 1.5e13; plain numbers as they are; must be positive."""
    if isinstance(value, bool) or value is None:
        raise ScenarioError(path, f"expected a token count, got {value!r}", "a number or e.g. 15T, 500B, 2.5M")
    if isinstance(value, (int, float)):
        n = float(value)
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([KMBGTkmbgt]?)\s*", str(value))
        if not m:
            raise ScenarioError(path, f"{value!r} is not a token count", "a number or e.g. 15T, 500B, 2.5M (K M B T)")
        n = float(m.group(1)) * SUFFIXES[m.group(2).upper()]
    if not n > 0:
        raise ScenarioError(path, f"{value!r} is not positive", "tokens > 0")
    return n


@dataclass(frozen=True, kw_only=True)
class Phase:
    tokens: float
    """Tokens trained in this phase."""
    seq_len: Optional[int] = None
    """Sequence length of the phase; null = the scenario's."""
    global_batch: Optional[int] = None
    """Sequences per step in the phase; null = the scenario's."""
    overrides: tuple[str, ...] = ()
    """Further `--set`-style overrides for this phase (a layout change: parallel.cp=16)."""
    name: str = ""

    def scenario_overrides(self) -> list[str]:
        out = [] if self.seq_len is None else [f"training.seq_len={self.seq_len}"]
        out += [] if self.global_batch is None else [f"training.global_batch={self.global_batch}"]
        return out + list(self.overrides)


@dataclass(frozen=True, kw_only=True)
class CheckpointSpec:
    interval_s: Optional[float] = field(default=None, metadata={"min": 1e-9})
    """Compute seconds between checkpoints; null = the interval that maximises goodput."""
    interval_steps: Optional[int] = field(default=None, metadata={"min": 1})
    """The same in optimizer steps (give one of the two)."""
    async_: bool = False
    """Asynchronous: the step pays only the device-to-host copy; the write to storage overlaps training."""


@dataclass(frozen=True, kw_only=True)
class _RawPhase:
    tokens: Any = None
    seq_len: Optional[int] = field(default=None, metadata={"min": 1})
    global_batch: Optional[int] = field(default=None, metadata={"min": 1})
    set: list[str] = field(default_factory=list)
    name: str = ""


@dataclass(frozen=True, kw_only=True)
class _RawCheckpoint:
    interval_s: Optional[float] = field(default=None, metadata={"min": 1e-9})
    interval_steps: Optional[int] = field(default=None, metadata={"min": 1})
    async_: bool = False


@dataclass(frozen=True, kw_only=True)
class _RawRun:
    tokens: Any = None
    phases: list[dict] = field(default_factory=list)
    checkpoint: dict = field(default_factory=dict)
    failures_per_gpu_hour: Optional[float] = field(default=None, metadata={"min": 0.0})
    price_per_gpu_hour: Optional[float] = field(default=None, metadata={"min": 0.0})


@dataclass(frozen=True, kw_only=True)
class RunSpec:
    phases: tuple[Phase, ...] = ()
    """One phase per stretch of the run with its own shape; empty = no tokens given (no whole-run)."""
    checkpoint: CheckpointSpec = CheckpointSpec()
    failures_per_gpu_hour: Optional[float] = None
    price_per_gpu_hour: Optional[float] = None

    @property
    def tokens(self) -> float:
        return sum(p.tokens for p in self.phases)


def parse_run(raw: Any, path: str = "run") -> RunSpec:
    """The `run:` mapping -> RunSpec, strictly. `checkpoint.async` is spelled `async` in YAML."""
    if raw is None:
        return RunSpec()
    if not isinstance(raw, dict):
        raise ScenarioError(path, f"expected a mapping, got {raw!r}"[:200])
    top = from_mapping(_RawRun, raw, path)
    if top.tokens is not None and top.phases:
        raise ScenarioError(f"{path}.tokens", "given together with phases", "tokens, or phases each with their tokens")
    phases = []
    for i, p in enumerate(top.phases):
        where = f"{path}.phases[{i}]"
        rp = from_mapping(_RawPhase, p, where)
        for j, text in enumerate(rp.set):
            if "=" not in str(text):
                raise ScenarioError(f"{where}.set[{j}]", f"{text!r} is not KEY=VALUE", "dotted.key=value, e.g. parallel.cp=4")
        phases.append(Phase(tokens=parse_tokens(rp.tokens, f"{where}.tokens"), seq_len=rp.seq_len,
                            global_batch=rp.global_batch, overrides=tuple(map(str, rp.set)), name=rp.name or f"phase {i + 1}"))
    if top.tokens is not None:
        phases = [Phase(tokens=parse_tokens(top.tokens, f"{path}.tokens"), name="whole run")]
    ck = dict(top.checkpoint)
    if "async" in ck:
        ck["async_"] = ck.pop("async")
    rc = from_mapping(_RawCheckpoint, ck, f"{path}.checkpoint")
    if rc.interval_s is not None and rc.interval_steps is not None:
        raise ScenarioError(f"{path}.checkpoint.interval_steps", "given together with interval_s", "one of the two")
    return RunSpec(phases=tuple(phases),
                   checkpoint=CheckpointSpec(interval_s=rc.interval_s, interval_steps=rc.interval_steps, async_=rc.async_),
                   failures_per_gpu_hour=top.failures_per_gpu_hour, price_per_gpu_hour=top.price_per_gpu_hour)
