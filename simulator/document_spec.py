"""`training.documents`: the lengths of the documents packed into each sequence, as the scenario gives them
(read strictly; `plan/documents.py` prices what packing does to attention)."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional

from .errors import ScenarioError
from .inputs import existing_file, read_text, short


DISTRIBUTIONS = ("fixed", "uniform", "lognormal", "histogram")
MAX_BINS = 1 << 16
"""Histogram bins at most (a bin per length up to 64K tokens)."""


@dataclass(frozen=True, kw_only=True)
class Documents:
    """`training.documents`: the lengths of the documents packed into each sequence."""
    distribution: str = field(metadata={"choices": DISTRIBUTIONS})
    """fixed: every document `mean` tokens; uniform: lengths uniform in mean +- spread; lognormal: log-normal
    lengths with that mean and standard deviation `spread`; histogram: `bins` or a `file`."""
    mean: Optional[float] = field(default=None, metadata={"min": 1.0, "max": 1 << 24})
    """Mean document length, tokens (fixed, uniform, lognormal)."""
    spread: Optional[float] = field(default=None, metadata={"min": 0.0, "max": 1 << 24})
    """uniform: half the range; lognormal: the standard deviation, tokens."""
    bins: Optional[list[list[float]]] = None
    """histogram: [[length, weight], ...] (weights need not sum to 1)."""
    file: Optional[str] = None
    """histogram: a CSV file of `length,weight` lines (a header line is skipped), read into `bins`."""


def check_documents(d: Documents, path: str = "training.documents") -> None:
    """Cross-key rules of `training.documents` (ScenarioError naming the key)."""
    if d.distribution != "histogram":
        if d.mean is None:
            raise ScenarioError(f"{path}.mean", f"missing for distribution {d.distribution}", "a length in tokens >= 1")
        if d.distribution != "fixed" and d.spread is None:
            raise ScenarioError(f"{path}.spread", f"missing for distribution {d.distribution}", "tokens >= 0")
        if d.distribution == "uniform" and d.mean - d.spread < 1:
            raise ScenarioError(f"{path}.spread", f"{d.spread:g} with mean {d.mean:g} allows lengths below 1", f"at most {d.mean - 1:g}")
        if d.bins is not None or d.file is not None:
            raise ScenarioError(f"{path}.bins", f"given with distribution {d.distribution}", "bins / file only with histogram")
        return
    if (d.bins is None) == (d.file is None) or d.bins is not None and not d.bins:
        raise ScenarioError(f"{path}.bins", "histogram needs bins or a file (one of them)", "[[length, weight], ...] or file: lengths.csv")
    if d.bins is not None:
        if len(d.bins) > MAX_BINS:
            raise ScenarioError(f"{path}.bins", f"{len(d.bins):,} bins", f"at most {MAX_BINS:,}")
        for i, b in enumerate(d.bins):
            if len(b) != 2 or not b[0] >= 1 or not b[1] >= 0:
                raise ScenarioError(f"{path}.bins[{i}]", f"{b} is not [length >= 1, weight >= 0]")
        if not sum(b[1] for b in d.bins) > 0:
            raise ScenarioError(f"{path}.bins", "all weights are zero", "at least one positive weight")


def read_histogram(text: str, where: str) -> list[list[float]]:
    """`length,weight` lines of a CSV (a non-numeric first line is a header)."""
    bins = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(",")]
        try:
            if len(parts) != 2:
                raise ValueError
            bins.append([float(parts[0]), float(parts[1])])
        except ValueError:
            if n == 1 and not bins:
                continue
            raise ScenarioError(where, f"line {n} is not `length,weight`", "a CSV of two numbers per line") from None
        if len(bins) > MAX_BINS:
            raise ScenarioError(where, f"more than {MAX_BINS:,} lines", f"at most {MAX_BINS:,} bins")
    return bins


def resolve_documents(d: Documents, base_dir: Path | None) -> Documents:
    """`d` with a histogram `file` read into `bins` (relative to the scenario's folder), checked."""
    if d.file is not None:
        f = existing_file(d.file, *([base_dir / d.file] if base_dir is not None else []), Path(d.file))
        if f is None:
            raise ScenarioError("training.documents.file", f"no such file {short(d.file)}", "a CSV of length,weight lines")
        d = replace(d, bins=read_histogram(read_text(f, "training.documents.file"), "training.documents.file"), file=None)
    check_documents(d)
    return d

