"""One rank's memory op by op: what is allocated and freed, when, over one or two optimizer steps.

The memory model (`memory.py`) gives each stage's peak as a sum; this module lays the same amounts out in
time from the passes an evaluator ran (start, end, kind, chunk), so the trace's memory counter, the
`--memory-plot` and the comparison with PyTorch (validation/memory_timeline.py) all draw one curve:

- weights (and the fp32 master copies, created with the optimizer) and the buffers allocated outside
  the caching allocator (CUDA context, NCCL) are held from the start;
- a forward stores its activations tensor by tensor: the embedding's terms, then each layer's
  (`layer_activation_terms`, in the order the layer uses them), then the head's, the terms of a unit
  spread evenly over the unit's share of the pass, each at the start of its slice (a saved tensor is
  the input of the op that saves it: it exists when that op starts, e.g. a layer's input, made by the
  layer before, or under full recompute the checkpoint's input); a backward (B or BW) releases them in reverse order
  (PyTorch frees a node's saved tensors when its backward has run). The pass is one interval to the evaluator; the units share it in proportion
  to their GEMMs' parameters (`_slot_ends`);
- the temporaries of `buffer_bytes` are held through each pass at their largest, as the memory model
  charges them on top of all activations in flight: a forward holds the rank's worst layer temporaries,
  a backward `_transient_total` (the layer ones or, on the chunk with the loss, the logits' gradient when
  larger); the held buffers (DP buckets, ZeRO-3 gathers, weight caches) and the allocator slack are held
  from the step's first pass to its last, the optimizer's temporaries through the optimizer step;
- gradients: with `training.grad_accum_fused` (Megatron's contiguous main-grad buffer, allocated once and
  zeroed in place) they are held from the start; without it (PyTorch autograd's `.grad`) each unit's
  gradient appears when the step's first backward through it ends and all are freed after the optimizer
  step (`zero_grad(set_to_none=True)`, PyTorch's default since 2.0);
- Adam's first and second moments appear at the first optimizer step (`torch.optim.Adam(W)` creates
  `exp_avg` and `exp_avg_sq` lazily in its first `step()`); `first_step=False` draws a later step, with
  them already there.

So the largest level over two steps is the memory model's stage peak (`memory.stage_memory(...).peak`):
states + activations in flight + the rank's largest temporaries + held buffers, reached at the start of a
backward that finds the schedule's in-flight micro-batches all stored (tests/test_memory_timeline.py).
The exceptions are physical, not bookkeeping: with unfused gradients and one micro-batch per step, no
gradient exists yet while all activations are held, so the timeline's peak is below the model's by at
most the gradients; and with several chunks per rank, the larger logits-gradient temporary is drawn only
in the backward of the chunk holding the loss; with activation offloading (`plan/offload.py`) an offloaded layer's moved
bytes leave at the end of the forward slot where the compute waits for their copy and come back at the start of the
backward slot that issues their reload, so the model's in-flight group (`te_v1`'s `offload_in_flight`, a layer temporary
beside the head's) is drawn as it moves and the timeline's peak may be below the model's by at most that group.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..scenario import Scenario
from .layout import is_first_chunk, is_last_chunk, rank_chunks
from .memory import (HELD_BUFFERS, LAYER_TRANSIENTS, OPTIMIZER_TRANSIENTS,
                     OUTSIDE_ALLOCATOR, _transient_total, buffer_bytes, embedding_activation_terms, optimizer_state_parts,
                     head_activation_terms, layer_activation_terms, static_bytes, zero_groups)
from .sharded_params import embedding_rank_params, head_rank_tensors, layer_rank_params, rank_params
from .offload import offload_plan

CATEGORIES = ("parameters", "buffers", "gradients", "optimizer state", "activations")
"""What an event belongs to, in the order the plot stacks them (PyTorch memory profiler's categories)."""


@dataclass(frozen=True, slots=True)
class PassTime:
    """One pass as an evaluator ran it: [start, end] seconds, kind F | B | W | BW, global chunk index."""
    start: float
    end: float
    kind: str
    chunk: int
    micro_batch: int = 0


@dataclass(frozen=True, slots=True)
class MemoryEvent:
    """`delta` bytes allocated (> 0) or freed (< 0) at `time` for `what` (e.g. "activations L3 mb0"),
    in `category` (one of `CATEGORIES`)."""
    time: float
    delta: float
    category: str
    what: str


@dataclass(frozen=True, slots=True)
class _Unit:
    """A piece of a chunk's pass: its stored tensors in forward order (name, bytes), the gradient bytes of
    its parameters and its share of the pass's time (its GEMMs' parameters: the embedding is a lookup, 0)."""
    name: str
    terms: tuple[tuple[str, float], ...]
    grads: float
    gemm_params: float


def _terms(d: dict[str, float]) -> tuple[tuple[str, float], ...]:
    return tuple((k, float(v)) for k, v in d.items() if v) or (("activations", 0.0),)


def _units(sc: Scenario, pp_rank: int, chunk: int, grads_per_param: float) -> list[_Unit]:
    """The chunk's units in forward order: embedding (a route's first chunk), layers, head (its last)."""
    layers = next(ls for c, ls in rank_chunks(sc, pp_rank) if c == chunk)
    rp = rank_params(sc, pp_rank)
    out = []
    if is_first_chunk(sc, chunk):
        out.append(_Unit("embedding", _terms(embedding_activation_terms(sc)),
                         grads_per_param * embedding_rank_params(sc), 0.0))
    for i in layers:
        n = sum(layer_rank_params(sc, i))
        out.append(_Unit(f"L{i}", _terms(layer_activation_terms(sc, i)), grads_per_param * n, n))
    if is_last_chunk(sc, chunk):
        n = sum(head_rank_tensors(sc, rp.embedding))
        out.append(_Unit("head", _terms(head_activation_terms(sc)), grads_per_param * n, n))
    return out


def _offload_moves(sc: Scenario) -> tuple[dict, dict]:
    """Activation offloading (`plan/offload.py`): unit name -> [(what, bytes)] freed at the end of that layer's forward
    slot (the copies the compute waits for there), and unit name -> [(what, bytes)] allocated at the start of that
    layer's backward slot (the reloads it issues)."""
    plan = offload_plan(sc)
    freed: dict = {}
    loaded: dict = {}
    if plan is None:
        return freed, loaded
    moved = {c.key: c.bytes for lc in plan.forward.values() for c in lc.issue}
    for layer, lc in plan.forward.items():
        for key, _ in lc.wait:
            freed.setdefault(f"L{layer}", []).append((key, moved[key]))
    for layer, lc in plan.backward.items():
        for c in lc.issue:
            loaded.setdefault(f"L{layer}", []).append((c.key, c.bytes))
    return freed, loaded


def _adam_share(sc: Scenario) -> float:
    """Part of the optimizer bytes that Adam creates at its first step: m and v, not the fp32 master."""
    tr = sc.training
    master, moments = optimizer_state_parts(tr.precision, tr.optimizer, tr.autocast, tr.adam_moment_dtype)
    return moments / (moments + master) if moments else 0.0


def _slot_ends(p: PassTime, units: list[_Unit]) -> list[float]:
    """When each unit's share of the pass ends, in the order given: the pass's time split in proportion to
    the units' GEMM parameters (2 x params x tokens FLOPs each way; attention's s^2 part is not counted),
    equally when none has any."""
    w = [u.gemm_params for u in units]
    total = sum(w)
    if total <= 0:
        w, total = [1.0] * len(units), float(len(units))
    out, acc = [], 0.0
    for x in w:
        acc += x
        out.append(p.start + (p.end - p.start) * acc / total)
    out[-1] = p.end
    return out


DETAILS = ("tensor", "layer")
"""`memory_events` granularity: every saved tensor, or one event per layer (embedding, head) and pass
(the trace takes it when the tensors would make its counters too many)."""


def memory_events(sc: Scenario, pp_rank: int, passes: list[PassTime], optimizer: list[tuple[float, float]],
                  *, first_step: bool = True, detail: str = "tensor") -> list[MemoryEvent]:
    """Allocations and frees of one rank of stage `pp_rank` (module docstring), sorted by time with frees
    first at one instant. `passes`: the rank's passes over the steps run; `optimizer`: each step's
    optimizer interval, in order (a pass belongs to the step whose optimizer interval follows it);
    `detail`: one of `DETAILS` (the levels at layer boundaries and the peak are the same)."""
    if detail not in DETAILS:
        raise ValueError(f"detail {detail!r}: allowed {' | '.join(DETAILS)}")
    groups = zero_groups(sc)
    st = static_bytes(sc, pp_rank, groups=groups)
    kinds = buffer_bytes(sc, pp_rank, groups=groups)
    rp = rank_params(sc, pp_rank)
    lazy_grads = not sc.training.grad_accum_fused
    adam = st["optimizer"] * _adam_share(sc)
    ev = [MemoryEvent(0.0, st["weights"], "parameters", "weights"),
          MemoryEvent(0.0, st["optimizer"] - adam, "optimizer state", "master weights"),
          MemoryEvent(0.0, sum(kinds[k] for k in OUTSIDE_ALLOCATOR), "buffers", "CUDA context and NCCL")]
    if not first_step:
        ev.append(MemoryEvent(0.0, adam, "optimizer state", "Adam m and v"))
    if not lazy_grads:
        ev.append(MemoryEvent(0.0, st["grads"], "gradients", "gradient buffer"))
    held = sum(kinds[k] for k in HELD_BUFFERS if k not in OUTSIDE_ALLOCATOR) + kinds["fragmentation"]
    # offloaded layers are drawn leaving and coming back (`_offload_moves`), not as the model's in-flight temporary
    layer_tmp = sum(kinds[k] for k in LAYER_TRANSIENTS if k != "offload_in_flight")
    freed, loaded = _offload_moves(sc)
    bwd_tmp = {c: (_transient_total(kinds) if is_last_chunk(sc, c) else layer_tmp) for c, _ in rank_chunks(sc, pp_rank)}
    per_param = st["grads"] / rp.total if rp.total else 0.0
    units = {c: _units(sc, pp_rank, c, per_param) for c, _ in rank_chunks(sc, pp_rank)}
    if detail == "layer":
        units = {c: [_Unit(u.name, (("activations", sum(v for _, v in u.terms)),), u.grads, u.gemm_params) for u in us]
                 for c, us in units.items()}
    ends = [b for _, b in optimizer] or [float("inf")]
    steps: list[list[PassTime]] = [[] for _ in ends]
    for p in sorted(passes, key=lambda p: p.start):
        steps[next((i for i, e in enumerate(ends) if p.end <= e), len(ends) - 1)].append(p)
    for s, step_passes in enumerate(steps):
        if step_passes:
            a, b = step_passes[0].start, max(p.end for p in step_passes)
            ev += [MemoryEvent(a, held, "buffers", "held buffers"), MemoryEvent(b, -held, "buffers", "held buffers")]
        graded: set = set()
        grads_made = 0.0
        for p in step_passes:
            us, mb = units[p.chunk], f"mb{p.micro_batch}"
            if p.kind == "F":
                ev += [MemoryEvent(p.start, layer_tmp, "buffers", "layer temporaries"),
                       MemoryEvent(p.end, -layer_tmp, "buffers", "layer temporaries")]
                ends_ = _slot_ends(p, us)
                for a0, a1, u in zip([p.start] + ends_[:-1], ends_, us):
                    n = len(u.terms)
                    ev += [MemoryEvent(a0 + (a1 - a0) * k / n, v, "activations", f"{u.name} {name} {mb}")
                           for k, (name, v) in enumerate(u.terms)]
                    ev += [MemoryEvent(a1, -v, "activations", f"{key} offloaded {mb}") for key, v in freed.get(u.name, ())]
            elif p.kind in ("B", "BW"):
                tmp = bwd_tmp[p.chunk]
                ev += [MemoryEvent(p.start, tmp, "buffers", "backward temporaries"),
                       MemoryEvent(p.end, -tmp, "buffers", "backward temporaries")]
                back = us[::-1]
                ends_ = _slot_ends(p, back)
                for a0, t, u in zip([p.start] + ends_[:-1], ends_, back):
                    ev += [MemoryEvent(a0, v, "activations", f"{key} reloaded {mb}") for key, v in loaded.get(u.name, ())]
                    n = len(u.terms)
                    ev += [MemoryEvent(a0 + (t - a0) * (k + 1) / n, -v, "activations", f"{u.name} {name} {mb}")
                           for k, (name, v) in enumerate(reversed(u.terms))]
                    if lazy_grads and (p.chunk, u.name) not in graded:
                        graded.add((p.chunk, u.name))
                        grads_made += u.grads
                        ev.append(MemoryEvent(t, u.grads, "gradients", f"gradients {u.name}"))
        if s < len(optimizer):
            a, b = optimizer[s]
            opt_tmp = sum(kinds[k] for k in OPTIMIZER_TRANSIENTS)
            ev += [MemoryEvent(a, opt_tmp, "buffers", "optimizer temporaries"),
                   MemoryEvent(b, -opt_tmp, "buffers", "optimizer temporaries")]
            if s == 0 and first_step:
                ev.append(MemoryEvent(a, adam, "optimizer state", "Adam m and v"))
            if lazy_grads:
                ev.append(MemoryEvent(b, -grads_made, "gradients", "zero_grad(set_to_none=True)"))
    ev = [e for e in ev if e.delta != 0]
    ev.sort(key=lambda e: (e.time, e.delta > 0))
    return ev


def memory_levels(events: list[MemoryEvent]) -> list[tuple[float, float, str]]:
    """(time, bytes held, what changed) after each instant's events, one row per distinct time (frees
    before allocations at an instant, so a drop is never hidden under a rise)."""
    out: list[tuple[float, float, str]] = []
    held = 0.0
    for e in events:
        held += e.delta
        if out and out[-1][0] == e.time:
            out[-1] = (e.time, held, f"{out[-1][2]}; {e.what}")
        else:
            out.append((e.time, held, e.what))
    return out


def peak_bytes(events: list[MemoryEvent]) -> float:
    """The largest level of `memory_levels`."""
    return max((h for _, h, _ in memory_levels(events)), default=0.0)


def levels_by_category(events: list[MemoryEvent]) -> tuple[list[float], dict[str, list[float]]]:
    """Times and, per category of `CATEGORIES`, the bytes held at each (for the stacked plot)."""
    times = sorted({e.time for e in events} | {0.0})
    idx = {t: i for i, t in enumerate(times)}
    series = {c: [0.0] * len(times) for c in CATEGORIES}
    for e in events:  # deltas at their instant, then a running sum
        series[e.category][idx[e.time]] += e.delta
    for col in series.values():
        for i in range(1, len(col)):
            col[i] += col[i - 1]
    return times, series


def event_count(sc: Scenario, pp_rank: int, passes: int, detail: str = "tensor") -> int:
    """About how many activation events `memory_events` makes for `passes` passes (F and B) of the rank:
    the trace picks its `detail` by it."""
    per_chunk = [_units(sc, pp_rank, c, 0.0) for c, _ in rank_chunks(sc, pp_rank)]
    n = max((len(us) if detail == "layer" else sum(len(u.terms) for u in us) for us in per_chunk), default=0)
    return n * passes
