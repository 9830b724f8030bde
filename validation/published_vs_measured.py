"""Published kernel data against the kernels measured on a real GPU lent to the project (issue 38, item 2).

For every published point clustersim prices from where no GPU was lent (calibrate/profiles/h100-sxm-published.json,
the points of simulator/cost/kernel_data.json's H100 entry, plus kernel_data.json's points of the measured GPU where
it is another chip, and the H100 entry's cuDNN points of a named release, cudnn-frontend's 9.19.1 run on an H200):
the time the lent GPU measured at the same shape (`--measured`: the H200 of calibrate/profiles/h200-sxm-measured.json
by default, or the H100 of h100-sxm-measured.json), exact where that shape was measured, else the measured profile's
own interpolation (`Profile.gemm_time`; `Profile.attention_time` on one SDPA back end's points), and the ratio
published / measured TFLOP/s (> 1: the publication is faster than the lent GPU).

    python validation/published_vs_measured.py [--measured PROFILE] [--markdown | --json]

The H200 is the H100 SXM's die with 4.8 TB/s of HBM3e instead of 3.35: against it compute-bound rows compare the chips,
memory-bound ones (FLOPs per HBM byte, as validation/kernel_ceiling.py's ops count them, below the published GPU's
peak / HBM bandwidth) do not; against the H100 both do. Rows at the probe's floor (FLOOR_MARGIN) say nothing either
way. Summaries per table, GPU, dtype or kernel family and bound: count, median ratio, MAPE = mean |published /
measured - 1|.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from simulator.cost.kernel_data import gpu_points  # noqa: E402
from simulator.cost.profile import Profile
from simulator.cost.profile_load import load_profile  # noqa: E402
from simulator.errors import ScenarioError  # noqa: E402
from simulator.inputs import read_json_file  # noqa: E402
from validation.kernel_ceiling import attention_op, gemm_op  # noqa: E402

PUBLISHED = ROOT / "calibrate/profiles/h100-sxm-published.json"
SOURCES = ROOT / "calibrate/profiles/h100-sxm-published.sources.json"
MEASURED = ROOT / "calibrate/profiles/h200-sxm-measured.json"
MEASURED_H100 = ROOT / "calibrate/profiles/h100-sxm-measured.json"
FLOOR_MARGIN = 1.4
"""A measured median below this many times the smallest median of its table (GEMM dtype; attention back end and
phase) is the probe's floor, not the kernel's, in a profile whose short calls were timed one at a time as the host
issued them (calibrate before it queued calls shorter than 1 ms, calibrate/timing.py): such a kernel read the host's
time per call (26-35 us for any BF16 GEMM on the H200 lent on 2026-11-26, 1.3x the smallest; 34-37 us for FP8). Rows
resting on such points (the shape's own, or the grid points its interpolation brackets it with) are reported as
`floor` and say nothing about the kernel. 1.4 kept that band and no more: the next BF16 grid points, 46 us (1.8x), and
FP8's 1024x4096x8192, 50 us (1.46x), ran at their neighbours' TFLOP/s. The shipped profile's GEMM and attention tables
were timed queued (2026-11-27), and none of its rows sits at the floor; the check stays for profiles from older runs."""
SHORT_SEQ = 1024
"""Attention rows up to this sequence length are summarised apart. The H200 was measured at batch x heads 16 and 64
only, and the profile interpolates attention by work (bh * s_q * s_kv): a published row at s 512-1024 (bh 256-1024 in
the FA3 paper's benchmark) is priced from measured s 2048-4096 kernels of equal work, which run more efficiently than
short ones; the measured kernels at its own s are 4-16x smaller."""
MEASURED_BACKEND = {"fa2": "flash", "cudnn": "cudnn", "fa3": "cudnn"}
"""The measured SDPA back end each published attention family is compared with: PyTorch's `flash` back end is
FlashAttention-2; `cudnn` is cuDNN's fused attention; FlashAttention-3 is not in SDPA, so it is set beside cuDNN
(the fastest measured back end on Hopper), which says how far SDPA's best is from FA3, not whether FA3's figure is right."""


@dataclass(frozen=True, kw_only=True)
class Row:
    """One published point and the lent GPU's measured time at its shape."""
    table: str
    """gemm | attention"""
    group: str
    """The dtype of a GEMM; the published kernel family of an attention point (fa2, fa3, cudnn)."""
    chip: str
    """The GPU the figure was published for (H100 or H200)."""
    what: str
    bound: str
    """floor (the measured time is the probe's floor, FLOOR_MARGIN) | compute | memory (FLOPs per HBM byte against
    the published GPU's ridge)."""
    published_tflops: float
    measured_tflops: float | None
    """None when the shape is outside the measured profile's range."""
    how: str
    """exact (the shape was measured) | interpolated | extrapolated (beyond the measured grid) | out of range."""
    against: str
    """What was measured: the dtype, or the SDPA back end (with a note where it is not the same kernel)."""
    source: str
    seq: int = 0
    """An attention point's sequence length (0 for a GEMM)."""

    @property
    def ratio(self) -> float | None:
        """Published / measured TFLOP/s (= measured / published time)."""
        return None if self.measured_tflops is None else self.published_tflops / self.measured_tflops


def ridge(prof: Profile, dtype: str) -> float:
    """FLOPs per HBM byte at which the profile's GPU turns from memory- to compute-bound: peak / HBM bandwidth."""
    return prof.spec.peak_tflops[dtype] * 1e12 / (prof.spec.hbm_bandwidth_gbs * 1e9)


def bound_of(op, prof: Profile, seconds: float | None, floor_s: float) -> str:
    """floor where the measured time is within FLOOR_MARGIN of its table's smallest, else compute or memory."""
    if seconds is not None and seconds < FLOOR_MARGIN * floor_s:
        return "floor"
    return "compute" if op.flops / op.bytes >= ridge(prof, "bf16" if op.kind == "attention" else op.dtype) else "memory"


def short_source(text: str) -> str:
    """The publication's name: the text before its first parenthesis; its first two comma parts if the first is short."""
    parts = text.split(" (")[0].split(", ")
    return ", ".join(parts[:2]) if len(parts[0]) < 15 and len(parts) > 1 else parts[0]


def gemm_row(p, chip: str, published: Profile, measured: Profile, source: str, note: str = "") -> Row:
    """p: anything with dtype, m, n, k and the published seconds `time_s`."""
    op = gemm_op(p)
    seconds = measured.gemm_time(p.dtype, p.m, p.n, p.k)
    mine = [q for q in measured.gemm if q.dtype == p.dtype]
    exact = [q.time_s for q in mine if (q.m, q.n, q.k) == (p.m, p.n, p.k)]
    corners, beyond = grid_corners([q for q in mine if q.set == "grid"], (p.m, p.n, p.k))
    # an interpolation is only as good as the grid points it rests on: the floor if any of them is
    leaned_on = exact or [t for t in corners if t is not None] or ([seconds] if seconds is not None else [])
    return Row(table="gemm", group=p.dtype, chip=chip, what=f"{p.m}x{p.n}x{p.k}" + note,
               bound=bound_of(op, published, min(leaned_on, default=None),
                              min((q.time_s for q in mine), default=0.0)),
               published_tflops=op.flops / p.time_s / 1e12,
               measured_tflops=None if seconds is None else op.flops / seconds / 1e12,
               how="out of range" if seconds is None else "exact" if exact else
               "extrapolated" if beyond else "interpolated", against=p.dtype, source=source)


def grid_corners(grid: list, shape: tuple[int, int, int]) -> tuple[list[float | None], bool]:
    """(the measured median seconds of the grid points that bracket `shape`, whether `shape` lies beyond the grid): each
    dim's nearest grid values below and above it, clamped to the grid (the profile prices beyond it at the edge's
    throughput)."""
    if not grid:
        return [], True
    times = {(q.m, q.n, q.k): q.time_s for q in grid}
    brackets, beyond = [], False
    for d, x in enumerate(shape):
        axis = sorted({key[d] for key in times})
        beyond |= not axis[0] <= x <= axis[-1]
        x = min(max(x, axis[0]), axis[-1])
        brackets.append({max(a for a in axis if a <= x), min(a for a in axis if a >= x)})
    return [times.get((a, b, c)) for a in brackets[0] for b in brackets[1] for c in brackets[2]], beyond


def chip(prof: Profile) -> str:
    """A profile's GPU in one word: its spec's name up to the first space ("H100", "H200")."""
    return prof.spec.gpu_name.split()[0]


def gemm_rows(published: Profile, measured: Profile, sources: dict, extra: list[dict]) -> list[Row]:
    """Every published H100 GEMM, then `extra` (kernel_data.json's points of the measured GPU, as dicts)."""
    out = [gemm_row(p, "H100", published, measured,
                    short_source(sources.get(f"gemm/{p.dtype}/{p.m}x{p.n}x{p.k}", {}).get("source", "?")))
           for p in published.gemm]
    for q in extra:
        p = SimpleNamespace(dtype=q["dtype"], m=q["m"], n=q["n"], k=q["k"],
                            time_s=2.0 * q["m"] * q["n"] * q["k"] / (q["tflops"] * 1e12))
        out.append(gemm_row(p, chip(measured), measured, measured, short_source(q["source"]),
                            " (ceiling)" if q.get("max_achievable") else ""))
    return out


def attention_row(p, published: Profile, measured: Profile, backend: str, group: str, source: str) -> Row:
    """One published attention point `p` (a profile's point: shape, phase, time_s) against the measured profile's
    `backend` at its shape: exact where that shape was measured, else the profile's interpolation."""
    op = attention_op(p)
    points = [q for q in measured.attention if q.backend == backend]
    frac = 0.5 if (p.causal and p.s_q == p.s_kv) else 1.0
    seconds = measured.attention_time(p.dtype, p.batch_heads, p.s_q, p.s_kv, p.d_head, frac, p.phase, backend)
    exact = any((q.dtype, q.batch_heads, q.s_q, q.s_kv, q.d_head, q.causal, q.phase) ==
                (p.dtype, p.batch_heads, p.s_q, p.s_kv, p.d_head, p.causal, p.phase) for q in points)
    mask = "causal" if p.causal else "full"
    # the host's time per call, hence the floor, differs by phase (autograd's backward: 88 us, forward: 39-42)
    floor_s = min((q.time_s for q in points if q.phase == p.phase), default=0.0)
    return Row(table="attention", group=group, chip="H100",
               what=f"{p.phase} {mask} d{p.d_head} bh{p.batch_heads} s{p.s_q}",
               bound=bound_of(op, published, seconds, floor_s),
               published_tflops=op.flops / p.time_s / 1e12,
               measured_tflops=None if seconds is None else op.flops / seconds / 1e12,
               how="out of range" if seconds is None else "exact" if exact else "interpolated",
               against=backend + (" (FA3 is not in SDPA)" if group == "fa3" else ""), source=source, seq=p.s_q)


def attention_rows(published: Profile, measured: Profile, sources: dict) -> list[Row]:
    out = []
    for p in published.attention:
        backend = MEASURED_BACKEND.get(p.backend)
        if backend is None:
            raise ScenarioError(f"{published.source}: attention backend", f"{p.backend!r} has no measured counterpart",
                                " | ".join(MEASURED_BACKEND))
        key = f"attention/{p.backend}/{p.dtype}/d{p.d_head}/{'causal' if p.causal else 'full'}/{p.phase}/s{p.s_q}"
        out.append(attention_row(p, published, measured, backend, p.backend,
                                 short_source(sources.get(key, {}).get("source", "?"))))
    return out


RELEASE_BATCH_HEADS = 64
"""Batch x query heads of the H100 entry's named-release cuDNN points: cudnn-frontend's Llama 3.1 rows at batch 1 with
64 query heads (results/h200_919_only_cudnn/llama3.1_20260227_034703.csv)."""


def release_rows(published: Profile, measured: Profile, gpu: str = "H100 SXM5 80GB") -> list[Row]:
    """kernel_data.json's cuDNN points of a named release in `gpu`'s entry (cudnn-frontend's 9.19.1 run on an H200,
    which prices the H100 from that release on: simulator/cost/cudnn_release.py) against the measured profile's SDPA
    `cudnn` back end at the same shape, grouped by release (`attention_row`, as a profile's point)."""
    from simulator.cost.kernel_data import load_data
    out = []
    for q in load_data()["gpus"][gpu]["attention"]:
        if q["family"] != "cudnn" or q.get("cudnn_version") is None or q["phase"] not in ("fwd", "bwd"):
            continue
        p = SimpleNamespace(dtype=q["dtype"], batch_heads=RELEASE_BATCH_HEADS, s_q=q["seq"], s_kv=q["seq"],
                            d_head=q["d_head"], causal=q["causal"], phase=q["phase"], time_s=0.0)
        p.time_s = attention_op(p).flops / (q["tflops"] * 1e12)
        out.append(attention_row(p, published, measured, "cudnn", f"cudnn {q['cudnn_version']}",
                                 short_source(q["source"])))
    return out


def by_family(r: Row) -> tuple[str, str, str, str]:
    """The summary's groups: table, published GPU, dtype or kernel family and sequence class (SHORT_SEQ), bound."""
    if r.table == "attention":
        return r.table, r.chip, f"{r.group} s{'<=' if r.seq <= SHORT_SEQ else '>'}{SHORT_SEQ}", r.bound
    return r.table, r.chip, r.group, r.bound


def by_source_or_phase(r: Row) -> tuple[str, str, str, str]:
    """Finer groups for the compute-bound rows: GEMMs by publication, attention by phase."""
    table, chip, group, bound = by_family(r)
    return table, chip, f"{group} {r.source if table == 'gemm' else r.what.split()[0]}", bound


def summary(rows: list[Row], key=by_family) -> list[dict]:
    """Per `key(row)` (table, chip, group, bound), in first-seen order: points compared, median ratio, MAPE, and the
    points out of the measured range."""
    groups: dict[tuple, list[Row]] = {}
    for r in rows:
        groups.setdefault(key(r), []).append(r)
    out = []
    for (table, chip, group, bound), rs in groups.items():
        ratios = [r.ratio for r in rs if r.ratio is not None]
        out.append({"table": table, "chip": chip, "group": group, "bound": bound, "count": len(ratios),
                    "median_ratio": statistics.median(ratios) if ratios else None,
                    "mape": statistics.fmean(abs(x - 1.0) for x in ratios) if ratios else None,
                    "out_of_range": len(rs) - len(ratios)})
    return out


def caveats(published: Profile, measured: Profile) -> list[str]:
    dev, lent = measured.provenance, chip(measured)
    same_memory = measured.spec.hbm_bandwidth_gbs == published.spec.hbm_bandwidth_gbs
    memory = (f"Same chip: the {lent} has the published GPU's SMs, peak and {measured.spec.hbm_bandwidth_gbs:.0f} GB/s "
              f"of HBM, so compute-bound and memory-bound rows both compare it (memory-bound: FLOP/B below the "
              f"ridge, {ridge(published, 'bf16'):.0f} BF16 / {ridge(published, 'fp8'):.0f} FP8)."
              if same_memory and chip(published) == lent else
              f"Same die, other memory: the {lent} has the {chip(published)} SXM's SMs and tensor-core peak but "
              f"{measured.spec.hbm_bandwidth_gbs:.0f} GB/s of HBM against {published.spec.hbm_bandwidth_gbs:.0f}: only "
              f"compute-bound rows compare the chips; memory-bound rows (FLOP/B below the published GPU's ridge, "
              f"{ridge(published, 'bf16'):.0f} BF16 / {ridge(published, 'fp8'):.0f} FP8 on the {chip(published)}) "
              f"are listed apart.")
    return [
        f"published: {published.provenance.device_name}; measured: {dev.device_name}, torch {dev.torch_version}, "
        f"CUDA {dev.cuda_version}, cuDNN {dev.cudnn_version}, driver {dev.driver_version}, {dev.date[:10]}.",
        memory,
        f"Other software: each figure ran its own library and version (the source column); the {lent} ran cuBLASLt "
        "through torch.matmul / torch._scaled_mm (FP8 with one scale per tensor; DeepGEMM's FP8 rows use 1x128 / "
        "128x128 block scales) and attention through torch SDPA.",
        f"floor: the {lent} time rests on points within {FLOOR_MARGIN}x of the probe's smallest time (the host's time "
        "per call, not the kernel's; see FLOOR_MARGIN): those ratios say nothing about the published figure.",
        "FlashAttention-3 is not one of PyTorch SDPA's back ends: fa3 rows are set beside the measured cudnn back end.",
        f"Attention was measured at batch x heads 16 and 64 and is interpolated by work: rows up to s {SHORT_SEQ} "
        "(published at bh 256-1024) are priced from longer measured sequences and summarised apart (see SHORT_SEQ).",
        "measured = the profile's price (mean of repeats) at an exact shape, else its interpolation; ratio = published "
        f"/ measured TFLOP/s (> 1: the figure is faster than this {lent}).",
    ]


def row_columns(lent: str) -> tuple[str, ...]:
    """The per-point table's header, `lent` the measured GPU in one word."""
    return ("table", "chip", "group", "shape", "bound", "pub TFLOP/s", f"{lent} TFLOP/s", "pub/meas", f"{lent} point",
            "compared with", "source")



SUMMARY_COLUMNS = ("table", "chip", "group", "bound", "points", "median pub/meas", "MAPE", "out of range")


def row_cells(r: Row) -> list[str]:
    return [r.table, r.chip, r.group, r.what, r.bound, f"{r.published_tflops:.1f}", _fmt(r.measured_tflops, ".1f"),
            _fmt(r.ratio, ".3f"), r.how, r.against, r.source]


def summary_cells(s: dict) -> list[str]:
    return [s["table"], s["chip"], s["group"], s["bound"], str(s["count"]), _fmt(s["median_ratio"], ".3f"),
            "-" if s["mape"] is None else f"{100 * s['mape']:.1f}%", str(s["out_of_range"])]


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def summaries(rows: list[Row]) -> dict:
    """The summary by family and bound, and the compute-bound rows' summary by source (GEMM) or phase (attention)."""
    return {"by_family": summary(rows),
            "compute_by_source_or_phase": summary([r for r in rows if r.bound == "compute"], by_source_or_phase)}


def render(head: list[str], rows: list[Row], markdown: bool, lent: str) -> str:
    """The rows and the two summaries (markdown: summaries first); `lent`: the measured GPU in one word."""
    sums = summaries(rows)
    title = f"Published kernel data against the {lent}'s measured kernels"
    tables = [(row_columns(lent), [row_cells(r) for r in rows])] + [
        (SUMMARY_COLUMNS, [summary_cells(s) for s in sums[k]]) for k in ("compute_by_source_or_phase", "by_family")]
    if markdown:
        out = [f"# {title}", ""] + [f"- {c}" for c in head]
        for cols, body in reversed(tables):
            out += ["", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
            out += ["| " + " | ".join(cells) + " |" for cells in body]
        return "\n".join(out)
    out = [title] + [f"  * {c}" for c in head]
    for cols, body in tables:
        widths = [max(len(c), *(len(cells[i]) for cells in body)) for i, c in enumerate(cols)]
        out += ["", "  ".join(c.ljust(w) for c, w in zip(cols, widths)).rstrip()]
        out += ["  ".join(x.ljust(w) for x, w in zip(cells, widths)).rstrip() for cells in body]
    return "\n".join(out)


def compare(published_path: Path = PUBLISHED, measured_path: Path = MEASURED,
            sources_path: Path | None = SOURCES, extra: list[dict] | None = None) -> tuple[list[str], list[Row]]:
    """(caveats, rows) of the published profile against the measured one; `extra` None: with kernel_data.json's
    points beyond the profile (the measured GPU's GEMMs, the H100's named cuDNN releases), [] or a list: those only."""
    published, measured = load_profile(published_path), load_profile(measured_path)
    for prof in (published, measured):
        if prof.spec is None:
            raise ScenarioError(f"cluster.profile {prof.source}", "has no spec (peak and HBM bandwidth)",
                                "a GPU profile with a spec")
    sources = read_json_file(sources_path, "sources")["points"] if sources_path is not None else {}
    releases = []
    if extra is None:  # the measured GPU's own published points, where they are not the published profile's already,
        extra = [] if chip(measured) == chip(published) else gpu_points(measured.spec.gpu_name)["gemm"]
        releases = release_rows(published, measured)  # and the H100 entry's cuDNN points of a named release (kernel_data.json)
    rows = gemm_rows(published, measured, sources, extra) + attention_rows(published, measured, sources) + releases
    return caveats(published, measured), rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", action="store_true", help="print the tables as markdown (writes no file)")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON")
    ap.add_argument("--measured", type=Path, default=MEASURED, metavar="PROFILE",
                    help=f"the measured profile (default {MEASURED.relative_to(ROOT)}; the H100's: "
                         f"{MEASURED_H100.relative_to(ROOT)})")
    a = ap.parse_args(argv)
    try:
        head, rows = compare(measured_path=a.measured)
        lent = chip(load_profile(a.measured))
    except ScenarioError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(summaries(rows), indent=1) if a.json else render(head, rows, a.markdown, lent))
    return 0


if __name__ == "__main__":
    sys.exit(main())
