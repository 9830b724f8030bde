"""The end-of-run table: per table and kind, the best and median achieved throughput against the spec
of the matching topology GPU (`profile["spec"]`), the way llm.c's dev/cuda probes print achieved vs peak."""
from __future__ import annotations

import statistics
from collections import defaultdict

from rich.table import Table

ADAMW_BYTES_PER_PARAM = 28
"""fp32 AdamW traffic: read param, grad, m, v (16 B), write param, m, v (12 B); docs/modeling.md §7.4 adds the
bf16 copy and the grad-norm read (~30-34 B) that a plain torch.optim.AdamW step does not do."""


def summary_rows(profile: dict) -> list[tuple[str, str, int, float, float, str, float | None, float | None]]:
    """(table, kind, points, best, median, unit, spec, best/spec)."""
    spec = profile.get("spec") or {}
    peak = spec.get("peak_tflops", {})
    hbm = spec.get("hbm_bandwidth_gbs") or None
    rows = []

    def add(table, kind, values, unit, ref):
        if values:
            best = max(values)
            rows.append((table, kind, len(values), best, statistics.median(values), unit, ref,
                         best / ref if ref else None))

    groups = defaultdict(list)
    for e in profile["gemm"]:
        groups[e["dtype"]].append(e["tflops"])
    for dtype, v in sorted(groups.items()):
        add("gemm", dtype, v, "TFLOP/s", peak.get(dtype))
    groups = defaultdict(list)
    for e in profile["attention"]:
        groups[(e["dtype"], e["phase"], e["backend"])].append(e["tflops"])
    for (dtype, phase, backend), v in sorted(groups.items()):
        add("attention", f"{backend} {phase} {dtype}", v, "TFLOP/s", peak.get(dtype))
    groups = defaultdict(list)
    for e in profile["elementwise"]:
        groups[(e["op"], e["phase"], e["dtype"])].append(e["gbs"])
    for (op, phase, dtype), v in sorted(groups.items()):
        add("elementwise", f"{op} {phase} {dtype}", v, "GB/s", hbm)
    groups = defaultdict(list)
    for e in profile["optimizer"]:
        groups[e["impl"]].append(e["params"] * ADAMW_BYTES_PER_PARAM / e["time_s"] / 1e9)
    for impl, v in sorted(groups.items()):
        add("optimizer", f"adamw {impl} (28 B/param)", v, "GB/s", hbm)
    groups = defaultdict(list)
    for e in profile["host_device"]:
        groups[f"{e['direction']} {'pinned' if e['pinned'] else 'pageable'}"].append(e["gbs"])
    for kind, v in sorted(groups.items()):
        add("host_device", kind, v, "GB/s", None)
    groups = defaultdict(list)
    for e in profile["collectives"]:
        groups[(e["collective"], e["group_size"], e["backend"])].append(e["busbw_gbs"])
    for (coll, n, backend), v in sorted(groups.items()):
        add("collectives", f"{coll} n={n} {backend} busbw", v, "GB/s", None)
    return rows


def summary_table(profile: dict) -> Table:
    spec = profile.get("spec")
    prov = profile["provenance"]
    title = (f"{prov['device_name']} ({prov['device_type']}, {prov['threads']} threads)"
             + (f" vs {spec['topology']} spec ({spec['gpu_name']})" if spec else " (no matching topology spec)"))
    table = Table(title=title)
    for col, justify in (("table", "left"), ("kind", "left"), ("points", "right"), ("best", "right"),
                         ("median", "right"), ("unit", "left"), ("spec", "right"), ("best/spec", "right")):
        table.add_column(col, justify=justify)
    for t, kind, n, best, med, unit, ref, frac in summary_rows(profile):
        table.add_row(t, kind, str(n), f"{best:.3g}", f"{med:.3g}", unit, f"{ref:.3g}" if ref else "-",
                      f"{frac:.0%}" if frac is not None else "-")
    failed = [c for c in profile["checks"] if not c["ok"]]
    table.caption = (f"{len(profile['skipped'])} measurements skipped, {len(failed)} of {len(profile['checks'])} "
                     f"reference checks failed; load average {prov.get('load_average_start')} -> "
                     f"{prov.get('load_average_end')}; {prov.get('wall_s', 0):.0f} s")
    return table
