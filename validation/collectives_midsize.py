"""Published nccl-tests bus bandwidth by message size against clustersim's, mid-size and large.

    python validation/collectives_midsize.py [--table ID]

Reads validation/references/collectives/nccl_tests_h100.yaml (each table: where it was read, the
hardware, NCCL version, collective, ranks, which busbw column, the matching topology, and the points).
For every table and size it prints the published busbw, clustersim's (`collectives.estimate` on the
table's topology, all ranks of `nodes` whole nodes, every GPU busy as in nccl-tests), their ratio and
the algorithm/protocol clustersim picked; then the mean absolute percentage error over the mid sizes
(2-128 MiB: DP buckets, TP activations) and the large ones (>= 512 MiB), per table and over all tables.
A table that names NCCL's algorithm (NCCL_ALGO=NVLS) is priced with that algorithm only.

A report, not a gate: it exits 0 whatever the error (validation/collectives_busbw.py gates the large
sizes; tests/test_collectives_midsize.py the mechanism).
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from simulator.cost.collectives import estimate  # noqa: E402
from simulator.topology import load_topology  # noqa: E402

REFERENCE = Path(__file__).resolve().parent / "references" / "collectives" / "nccl_tests_h100.yaml"
MID = (2 << 20, 128 << 20)
"""Mid sizes, inclusive: 2 MiB to 128 MiB."""
LARGE = 512 << 20
"""Large sizes: 512 MiB and up."""
ALGORITHMS = {"NVLS": ("nvls",), "RING": ("ring",), "TREE": ("tree",)}
"""A table's `algorithm` as NCCL_ALGO names it -> clustersim's algorithms; others: clustersim's choice."""


@dataclass(frozen=True)
class Row:
    table: str
    nbytes: int
    published: float
    predicted: float
    algorithm: str
    protocol: str

    @property
    def ratio(self) -> float:
        return self.predicted / self.published

    @property
    def error(self) -> float:
        return abs(self.ratio - 1)


def load_tables(path: Path = REFERENCE) -> list[dict]:
    """The tables of the reference file, each checked for the keys this script reads."""
    data = yaml.safe_load(path.read_text())
    tables = data["tables"]
    for t in tables:
        missing = {"id", "source", "collective", "ranks", "nodes", "topology", "points"} - set(t)
        if missing:
            raise ValueError(f"{path}: table {t.get('id', '?')} lacks {sorted(missing)}")
    return tables


def predict(table: dict) -> list[Row]:
    """clustersim's busbw at each of the table's sizes."""
    topo = load_topology(table["topology"])
    ranks = tuple(range(int(table["ranks"])))
    algos = ALGORITHMS.get(str(table.get("algorithm", "")).upper())
    rows = []
    for nbytes, busbw in table["points"]:
        e = estimate(topo, table["collective"], float(nbytes), ranks, algorithms=algos)
        rows.append(Row(table["id"], int(nbytes), float(busbw), e.busbw_GBps, e.algorithm, e.protocol))
    return rows


def mape(rows: list[Row]) -> float | None:
    return sum(r.error for r in rows) / len(rows) if rows else None


def split(rows: list[Row]) -> tuple[list[Row], list[Row]]:
    """(mid, large) rows."""
    return ([r for r in rows if MID[0] <= r.nbytes <= MID[1]], [r for r in rows if r.nbytes >= LARGE])


def _size(nbytes: int) -> str:
    return f"{nbytes >> 30} GiB" if nbytes >= 1 << 30 else f"{nbytes >> 20} MiB"


def _pct(x: float | None) -> str:
    return "   -  " if x is None else f"{x:6.1%}"


def report(tables: list[dict]) -> list[Row]:
    everything = []
    for t in tables:
        rows = predict(t)
        everything += rows
        print(f"\n{t['id']}: {t['hardware']}, NCCL {t.get('nccl', '?')}, {t['collective']} on {t['ranks']} ranks"
              f" ({t['nodes']} node{'s' if t['nodes'] > 1 else ''}), {t.get('column', 'busbw')}; topology {t['topology']}")
        print(f"  {'size':>8s} {'published':>9s} {'clustersim':>10s} {'ratio':>6s}  algorithm")
        for r in rows:
            print(f"  {_size(r.nbytes):>8s} {r.published:9.1f} {r.predicted:10.1f} {r.ratio:6.2f}  {r.algorithm}/{r.protocol}")
        mid, large = split(rows)
        print(f"  MAPE mid (2-128 MiB) {_pct(mape(mid))}   large (>= 512 MiB) {_pct(mape(large))}")
    mid, large = split(everything)
    print(f"\nall tables: MAPE mid (2-128 MiB, {len(mid)} points) {_pct(mape(mid))}"
          f"   large (>= 512 MiB, {len(large)} points) {_pct(mape(large))}")
    return everything


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", action="append", help="only this table id (repeatable)")
    args = ap.parse_args(argv)
    tables = load_tables()
    if args.table:
        known = {t["id"] for t in tables}
        unknown = sorted(set(args.table) - known)
        if unknown:
            print(f"error: --table {', '.join(unknown)}: no such table (known: {', '.join(sorted(known))})", file=sys.stderr)
            return 2
        tables = [t for t in tables if t["id"] in args.table]
    report(tables)
    return 0


if __name__ == "__main__":
    sys.exit(main())
