"""`python -m simulator collectives TOPOLOGY [--nodes N] [--json]`: an nccl-tests-like table of predicted
collective performance (docs/ecosystem.md §2.4 columns: size, count, type, time, algbw, busbw) for intra-node
groups of 2..gpus_per_node GPUs and inter-node groups across N nodes, from `collectives.estimate`.

Groups are contiguous ranks (a node's first k GPUs), the same GPU of each of N nodes (nccl-tests with
NCCL_TESTS_SPLIT="MOD g"), and all GPUs of N nodes. Every group of the same shape runs at once
(`siblings`), as in training and in a split nccl-tests run.
"""
from __future__ import annotations

import argparse

from ..cost.collectives import estimate
from ..cost.nccl_algorithms import COLLECTIVES
from ..errors import ScenarioError
from ..inputs import short
from ..outputs import strict_json
from ..scenario import MAX_GPUS
from ..topology import Topology, load_topology

ELEMENT_BYTES = 4
"""nccl-tests' default type is float (-d float)."""
MAX_BYTES = 1 << 40
"""Largest message size: 1 TiB, 128x nccl-tests' usual 8G (a GPU holds at most a few hundred GB)."""


def _size(text: str) -> int:
    """nccl-tests style sizes: 8, 1K, 64M, 8G (powers of 1024), from 1 to MAX_BYTES."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    t = text.strip().upper().rstrip("B")
    try:
        value = float(t[:-1]) * units[t[-1]] if t and t[-1] in units else float(t)
    except (ValueError, IndexError):
        raise argparse.ArgumentTypeError(f"not a size: {short(text)} (e.g. 8, 1K, 64M, 8G)") from None
    if not 1 <= value <= MAX_BYTES:  # NaN fails too
        raise argparse.ArgumentTypeError(f"{short(text)} is not a size from 1 byte to 1T")
    return int(value)


def add_parser(subparsers):
    p = subparsers.add_parser("collectives", help="nccl-tests-like table of predicted collective performance")
    p.add_argument("topology", help="a name in topologies/ or a path to a topology YAML")
    p.add_argument("--nodes", type=int, default=None,
                   help="nodes for the inter-node groups (default 2, or 1 for a topology without NICs; 1 = intra-node only)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    p.add_argument("-b", "--minbytes", type=_size, default=8, help="smallest size (default 8, as nccl-tests)")
    p.add_argument("-e", "--maxbytes", type=_size, default=8 << 30, help="largest size (default 8G)")
    p.add_argument("-f", "--stepfactor", type=int, default=8, help="size multiplier between rows (default 8)")
    p.add_argument("--collective", action="append", choices=COLLECTIVES, help="only these collectives (repeatable)")
    p.set_defaults(func=run)
    return p


def groups(topology: Topology, nodes: int) -> list[tuple[str, tuple[int, ...]]]:
    """(label, ranks) for each group the table covers."""
    g = topology.node.gpus
    sizes = sorted({k for k in (2, 4, 8, 16, 32, 64) if k < g} | {g}) if g > 1 else []
    out = [(f"{k} GPUs in 1 node", tuple(range(k))) for k in sizes]
    if nodes > 1:
        out.append((f"1 GPU x {nodes} nodes", tuple(i * g for i in range(nodes))))
        if g > 1:
            out.append((f"{g} GPUs x {nodes} nodes", tuple(range(nodes * g))))
    return out


def sizes(lo: int, hi: int, factor: int) -> list[int]:
    out, s = [], max(lo, 1)
    while s <= hi:
        out.append(s)
        s *= factor
    return out


def table(topology: Topology, nodes: int, collectives, byte_sizes) -> list[dict]:
    rows = []
    for collective in collectives:
        for label, ranks in groups(topology, nodes):
            entry = {"collective": collective, "group": label, "ranks": len(ranks), "rows": []}
            for s in byte_sizes:
                e = estimate(topology, collective, s, ranks)
                entry["rows"].append({"size": s, "count": s // ELEMENT_BYTES, "type": "float",
                                      "time_us": e.time_s * 1e6, "algbw": e.algbw_GBps, "busbw": e.busbw_GBps,
                                      "algorithm": e.algorithm, "protocol": e.protocol, "bottleneck": e.bottleneck})
            rows.append(entry)
    return rows


def format_table(topology: Topology, entries: list[dict]) -> str:
    lines = [f"# clustersim predicted collectives on {topology.name} ({topology.gpu.name}, {topology.node.gpus} per node)",
             "# time = latency + bytes / bottleneck bandwidth, fastest NCCL-style algorithm; GB/s = 1e9 B/s"]
    for e in entries:
        lines += ["", f"# {e['collective']}  |  {e['group']}  ({e['ranks']} ranks)",
                  f"# {'size (B)':>12} {'count':>12} {'type':>6} {'time (us)':>11} {'algbw':>8} {'busbw':>8}  algorithm"]
        for r in e["rows"]:
            lines.append(f"  {r['size']:>12} {r['count']:>12} {r['type']:>6} {r['time_us']:>11.1f} {r['algbw']:>8.2f} "
                         f"{r['busbw']:>8.2f}  {r['algorithm']}/{r['protocol']} ({r['bottleneck']})")
        big = [r for r in e["rows"] if r["size"] >= 256 << 20] or e["rows"][-1:]
        lines.append(f"# Avg bus bandwidth (>= 256 MB) : {sum(r['busbw'] for r in big) / len(big):.2f}")
    return "\n".join(lines)


def run(args) -> int:
    topology = load_topology(args.topology, path="topology")
    if args.nodes is None:
        args.nodes = 2 if topology.node.nics else 1
    if not 1 <= args.nodes <= MAX_GPUS // topology.node.gpus:
        raise ScenarioError("--nodes", f"{args.nodes} is out of range",
                            f"1 .. {MAX_GPUS // topology.node.gpus:,} ({MAX_GPUS:,} GPUs in all, the simulator's limit)")
    if args.nodes > 1 and topology.node.nics == 0:
        raise ScenarioError("--nodes", f"{args.nodes} nodes but topology {topology.name} has no NICs", "1")
    if not 2 <= args.stepfactor <= MAX_BYTES:
        raise ScenarioError("--stepfactor", f"{args.stepfactor} is out of range", ">= 2")
    if args.minbytes > args.maxbytes:
        raise ScenarioError("--minbytes", f"{args.minbytes} is above --maxbytes {args.maxbytes}")
    entries = table(topology, args.nodes, args.collective or COLLECTIVES, sizes(args.minbytes, args.maxbytes, args.stepfactor))
    if args.json:
        print(strict_json({"topology": topology.name, "nodes": args.nodes, "groups": entries}, indent=1))
    else:
        print(format_table(topology, entries))
    return 0
