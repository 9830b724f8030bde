"""Chrome Trace Event JSON of a simulated step, for Perfetto (ui.perfetto.dev) or chrome://tracing.

Layout (docs/ecosystem.md §2.1): one process per traced rank (`pid` = global rank, `process_name`
"rank R (stage S)"), one thread per stream (compute, tp, cp, ep, dp, pp send, pp recv; `thread_name`).
Each pass is an `X` slice on the compute thread ("C3 mb5 F") with its ops nested inside it
("L3 mb5 F qkv"); communication ops sit on their stream's thread with `cat` = the dimension. PP
transfers are a send slice on the sender and a receive slice on the receiver joined by a flow (`s` ->
`f`, `bp: "e"`). `C` counter events track memory per rank op by op (`memory_counter`: activations
stored layer by layer through each forward and released through each backward, plan/memory_timeline.py).
Timestamps are microseconds (floats with ns resolution, as kineto writes them); every stream is serial,
so slices on one (pid, tid) nest strictly. Size is capped: only representative ranks are traced, and
when the op-level slices would exceed `max_op_slices` only the first and last micro-batches keep their
ops, the others show one slice per layer block.
`validate_trace` checks a trace in pure Python (the always-on test; docs/ecosystem.md §2.1).
"""
from __future__ import annotations

import json
from pathlib import Path

THREADS = ("compute", "tp", "cp", "ep", "dp", "pp send", "pp recv", "offload")
TID = {name: i + 1 for i, name in enumerate(THREADS)}
GIB = 2 ** 30
MAX_OP_SLICES = 250_000
"""About 40 MB of JSON: Perfetto's in-browser engine handles it (it has failed near 1 GB, perfetto#99)."""


MAX_MEMORY_COUNTERS = 20_000
"""Memory counter events per traced rank before the counter goes from one event per saved tensor to one
per layer (a 70B layout on 512 GPUs would otherwise add ~200k events, 20 MB, to its trace)."""


def rank_memory_events(sc, rk, *, first_step: bool = True, detail: str = "tensor") -> list:
    """The rank's allocations and frees op by op (`plan/memory_timeline.py`) from the passes and optimizer
    steps the engine recorded for it."""
    from ...plan.memory_timeline import PassTime, memory_events  # noqa: PLC0415
    passes = []
    for start, end, st, *_ in rk.rec.passes:
        passes.append(PassTime(start, end, st.kind, st.chunk, st.mb))
        if st.pair is not None:  # DualPipe's overlapped chunk: its backward of another micro-batch runs in the same pass
            passes.append(PassTime(start, end, st.pair.kind, st.pair.chunk, st.pair.mb))
    return memory_events(sc, rk.stage, passes, list(rk.rec.optimizer), first_step=first_step, detail=detail)


def memory_counter(sc, rk, max_events: int = MAX_MEMORY_COUNTERS) -> list[tuple[float, float]]:
    """(time, bytes held) for a rank's memory counter: a steady-state step (Adam's states already there)
    with activations stored tensor by tensor (layer by layer past `max_events`) through each forward and
    released through each backward (`plan/memory_timeline.py`); its largest value is the memory model's
    stage peak."""
    from ...plan.memory_timeline import memory_levels  # noqa: PLC0415
    detail = counter_detail(sc, rk, max_events)
    return [(t, held) for t, held, _ in memory_levels(rank_memory_events(sc, rk, first_step=False, detail=detail))]


def counter_detail(sc, rk, max_events: int = MAX_MEMORY_COUNTERS) -> str:
    """"tensor" while the rank's passes make at most `max_events` activation events that way, else "layer"."""
    from ...plan.memory_timeline import event_count  # noqa: PLC0415
    return "tensor" if event_count(sc, rk.stage, len(rk.rec.passes)) <= max_events else "layer"


def _ns(t: float) -> int:
    return int(round(t * 1e9))


def _x(name: str, cat: str, pid: int, tid: int, start: float, end: float, args: dict | None = None) -> dict:
    a, b = _ns(start), _ns(end)
    ev = {"name": name, "cat": cat, "ph": "X", "pid": pid, "tid": tid, "ts": a / 1000, "dur": max(0, b - a) / 1000}
    if args:
        ev["args"] = args
    return ev


def _detailed_mbs(eng, traced, cap: int) -> set | None:
    """Micro-batches whose passes keep op-level slices (None: all of them)."""
    total = 0
    for rk in traced:
        for _, _, _, tpl, sl in rk.rec.passes:
            total += len(tpl.slices) if tpl is not None else len(sl or ())
    if total <= cap:
        return None
    m = eng.sc.micro_batches
    keep = max(1, int(m * cap / total))
    return set(range((keep + 1) // 2)) | set(range(m - keep // 2, m))


def _block_spans(tpl) -> list[tuple[float, float]]:
    """Per block of a template: (first compute start, last compute end), offsets."""
    spans: dict = {}
    for s in tpl.slices:
        if s.stream == "compute":
            a, b = spans.get(s.block, (s.start, s.start + s.dur))
            spans[s.block] = (min(a, s.start), max(b, s.start + s.dur))
    return [spans[k] for k in sorted(spans)]


def build_trace(sc, eng, traced, static: list[float], max_op_slices: int = MAX_OP_SLICES) -> dict:
    events: list[dict] = []
    detail = _detailed_mbs(eng, traced, max_op_slices)
    spans_cache: dict = {}
    for rk in sorted(traced, key=lambda r: r.grank):
        pid = rk.grank
        events.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": f"rank {pid} (stage {rk.stage})"}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": pid, "args": {"sort_index": pid}})
        for name, tid in TID.items():
            events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}})
            events.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "args": {"sort_index": tid}})
        rec = rk.rec
        for start, end, st, tpl, explicit in rec.passes:
            label = " & ".join(f"C{part.chunk} mb{part.mb} {part.kind}" for part in st.parts)
            args = {"chunk": st.chunk, "micro_batch": st.mb, "pass": st.kind}
            if st.pair is not None:  # DualPipe's overlapped forward and backward (plan/overlap.py)
                args.update(pair_chunk=st.pair.chunk, pair_micro_batch=st.pair.mb, pair_pass=st.pair.kind)
            events.append(_x(label, "compute", pid, TID["compute"], start, end, args))
            blocks = eng.plan.blocks[st.key]
            if detail is None or st.mb in detail:
                slices = explicit if tpl is None else tpl.slices
                base = 0.0 if tpl is None else start
                for s in slices or ():
                    if s.dur <= 0 and s.stream != "compute":
                        continue
                    a = base + s.start
                    events.append(_x(f"{blocks[s.block].key} mb{st.mb} {s.letter} {s.name}", s.cat, pid, TID[s.stream],
                                     a, a + s.dur))
            elif tpl is not None:
                if id(tpl) not in spans_cache:
                    spans_cache[id(tpl)] = _block_spans(tpl)
                for k, (a, b) in enumerate(spans_cache[id(tpl)]):
                    events.append(_x(f"{blocks[k].key} mb{st.mb} {st.kind}", "compute", pid, TID["compute"],
                                     start + a, start + b))
        for a, b in rec.optimizer:
            events.append(_x("optimizer step", "compute", pid, TID["compute"], a, b))
        for a, b, label, dim in rec.tail:
            events.append(_x(label, dim, pid, TID[dim], a, b))
        for c, label in rec.colls:
            if c.end is not None and c.dur > 0:
                args = {"group_size": c.size}
                if c.contention_s > 0:  # it shared its links (engine/links.py): how much longer it took
                    args["contention_us"] = round(c.contention_s * 1e6, 3)
                events.append(_x(label, c.dim, pid, TID["dp"], c.start, c.end, args))
        for a, b, dst, fid, label in rec.sends:
            dst_rank = eng.ranks[dst].grank
            events.append(_x(f"send {label} to rank {dst_rank}", "pp", pid, TID["pp send"], a, b))
            if eng.ranks[dst].rec is not None:
                events.append({"name": "pp", "cat": "pp", "ph": "s", "id": fid, "pid": pid, "tid": TID["pp send"],
                               "ts": _ns(a) / 1000})
        for a, b, src, fid, label in rec.recvs:
            events.append(_x(f"recv {label} from rank {eng.ranks[src].grank}", "pp", pid, TID["pp recv"], a, b))
            if eng.ranks[src].rec is not None:
                events.append({"name": "pp", "cat": "pp", "ph": "f", "bp": "e", "id": fid, "pid": pid,
                               "tid": TID["pp recv"], "ts": _ns(a) / 1000})
        for t, held in memory_counter(sc, rk):
            events.append({"name": "memory", "ph": "C", "pid": pid, "ts": _ns(t) / 1000, "args": {"GiB": held / GIB}})
    return {"traceEvents": events, "displayTimeUnit": "ms", "schemaVersion": 1, "traceName": sc.name,
            "otherData": {"generator": "clustersim engine", "scenario": sc.name,
                          "ranks": "all (representative)" if len(traced) == len(eng.ranks) else "representative ranks"}}


def write_trace(path: Path, sc, eng, traced, static: list[float], max_op_slices: int = MAX_OP_SLICES) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # json.dumps takes the C encoder (json.dump streams through the pure-Python one: ~5x slower)
    path.write_text(json.dumps(build_trace(sc, eng, traced, static, max_op_slices), separators=(",", ":")))


# ----------------------------------------------------------------------------------- validation

_REQUIRED = {"X": ("name", "cat", "ph", "pid", "tid", "ts", "dur"), "C": ("name", "ph", "pid", "ts", "args"),
             "M": ("name", "ph", "pid", "args"), "s": ("id", "cat", "name", "pid", "tid", "ts"),
             "f": ("id", "cat", "name", "pid", "tid", "ts", "bp")}
_METADATA = ("process_name", "process_labels", "process_sort_index", "thread_name", "thread_sort_index")


def validate_trace(obj) -> list[str]:
    """Problems found in a Chrome trace object (empty list = valid): required keys per phase, numeric
    microsecond timestamps, dur >= 0, strict nesting of X slices per (pid, tid), flows paired."""
    errs: list[str] = []
    evs = obj.get("traceEvents") if isinstance(obj, dict) else None
    if not isinstance(evs, list):
        return ["no traceEvents list"]
    if obj.get("displayTimeUnit", "ms") not in ("ms", "us"):
        errs.append("displayTimeUnit must be ms (Perfetto reads ns as a timestamp unit)")
    rows: dict = {}
    flows: dict = {}
    for i, e in enumerate(evs):
        ph = e.get("ph")
        if ph not in _REQUIRED:
            errs.append(f"event {i}: unsupported ph {ph!r}")
            continue
        missing = [k for k in _REQUIRED[ph] if k not in e]
        if missing:
            errs.append(f"event {i} ({ph}): missing {missing}")
            continue
        if ph == "M" and e["name"] not in _METADATA:
            errs.append(f"event {i}: unknown metadata {e['name']!r}")
        if "ts" in e and (not isinstance(e["ts"], (int, float)) or e["ts"] < 0):
            errs.append(f"event {i}: ts {e['ts']!r} is not a non-negative number of microseconds")
        if ph == "X":
            if not isinstance(e["dur"], (int, float)) or e["dur"] < 0:
                errs.append(f"event {i}: dur {e['dur']!r} < 0")
                continue
            a = int(round(e["ts"] * 1000))
            rows.setdefault((e["pid"], e["tid"]), []).append((a, a + int(round(e["dur"] * 1000)), i))
        elif ph == "C":
            if not all(isinstance(v, (int, float)) for v in e["args"].values()):
                errs.append(f"event {i}: counter args must be numbers")
        elif ph in ("s", "f"):
            flows.setdefault(e["id"], {})[ph] = e
    for key, sl in rows.items():
        sl.sort(key=lambda x: (x[0], -(x[1] - x[0])))
        stack: list = []
        for a, b, i in sl:
            while stack and stack[-1][1] <= a:
                stack.pop()
            if stack and b > stack[-1][1]:
                errs.append(f"(pid, tid) {key}: slice {i} [{a}, {b}] ns overlaps slice {stack[-1][2]} "
                            f"[{stack[-1][0]}, {stack[-1][1]}] without nesting")
                if len(errs) > 50:
                    return errs
            stack.append((a, b, i))
    for fid, pair in flows.items():
        if set(pair) != {"s", "f"}:
            errs.append(f"flow {fid}: has {sorted(pair)} (needs s and f)")
        elif pair["f"]["ts"] < pair["s"]["ts"]:
            errs.append(f"flow {fid}: ends before it starts")
    return errs
