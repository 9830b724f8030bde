"""TP communication overlapped with the GEMM beside it, as the frameworks run it (`parallel.overlap_tp`).

With sequence parallelism every TP collective sits next to a GEMM that produces or consumes it: the
all-gather of the SP input before the column-parallel GEMM (QKV, FC1; the wgrad's re-gather before the
weight-gradient GEMM; the output gradient's gather before the row-parallel dgrad), the reduce-scatter after
the row-parallel GEMM (out_proj, FC2; the column-parallel dgrad's in the backward). Transformer Engine's
userbuffers (Megatron `--tp-comm-overlap`) and PyTorch's async TP (torchtitan `enable_async_tensor_parallel`,
micro-pipelined `fused_all_gather_matmul` / `fused_matmul_reduce_scatter`) split the pair into t chunks (t =
the TP size) in a ring exchange: chunk i of the GEMM runs while chunk i + 1 moves. So the overlap is bounded
by the data dependency, not free:

  all-gather -> GEMM:  the first chunk arrives before any GEMM chunk (exposed); the other t - 1 chunks move
                       under the first t - 1 GEMM chunks; the last GEMM chunk waits for the last one.
  GEMM -> reduce-scatter: the first GEMM chunk runs alone; the first t - 1 chunks' reduce-scatter moves under
                       the remaining GEMM chunks; the last chunk's is exposed.

Exposed per pair: 1/t of the collective, plus whatever of the rest is longer than the GEMM it hides behind;
and the GEMM runs as t GEMMs of 1/t of its rows (less efficient where they are small, `costs.gemm_efficiency`).
What the comm kernels take from the GEMM's SMs (Megatron-Bridge's userbuffers configurations reserve 1-24 of
an H100's 132 SMs per overlapped GEMM, `comm_overlap.py`; async TP copies through copy engines) is
`cluster.efficiency.comm_sm_share`, as for every overlapped collective (`sm_share.py`).

Published end-to-end gains this bounds: async TP ~8 % on Llama 3 8B and 70B (PyTorch blog "Distributed
w/ TorchTitan: Introducing Async Tensor Parallelism", 2024), 1.04-1.16x in torchtitan's
benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md.

PyTorch's micro-pipeline TP (torchtitan's async TP: `torch._inductor.config._micro_pipeline_tp`, framework
file `tp_overlap: micro_pipeline`) decomposes differently at both ends and matches fewer pairs. Read in torch
2.13.0 (the logic is the same in the 2025-06 source the published async-TP runs used, torch 38410cf9):
- `torch/distributed/_symmetric_memory/__init__.py:146-323` (`_pipelined_multi_all_gather_and_consume`): each
  rank copies its shard into its symmetric buffer and all ranks barrier (:262-263), the local shard's GEMM
  chunk runs at once (:269), then each of the t - 1 remote shards is pulled (a copy-engine copy,
  `copy_` from a peer's buffer; "Use copy engine-based copy whenever possible", :1668) and its GEMM chunk
  runs (:271-281). Nothing of the transfer is exposed ahead of the GEMM but the local copy; all of it
  moves under the GEMM chunks.
- `:325-440` (`_pipelined_produce_and_all2all`) with `_fused_matmul_reduce_scatter_impl` (:1254-1340): the
  GEMM chunk for each remote rank is computed and pulled by it (:367-436), the local chunk last (:438), then
  one reduction kernel sums the t stacked partials (`reduce_fn`, :1305/:1331): it reads the whole GEMM
  output and writes 1/t of it. That kernel, not a last transfer chunk, is what stays exposed.
So `micro_pipeline` prices: all-gather -> GEMM as the local copy (2/t of the collective's bytes through HBM,
exposed), then the whole transfer beside the GEMM's t chunks, the last chunk after it; GEMM -> reduce-scatter
as the first chunk, the whole transfer beside the other t - 1, then the reduction (bytes x (1 + 1/t)) exposed.
A TP collective it does not fuse stays as compiled vanilla TP runs it (blocking: its wait sits right before its
first use, and `reorder_for_compute_comm_overlap` is off by default, torch 2.13.0 `_inductor/config.py:402`).
Which pairs it fuses is decided in `plan/layer_ops.py` (the pass matches only an all-gather whose output is a
GEMM's left operand and a reduce-scatter whose input is one GEMM's output: not the weight gradient's input,
not a sum of several linears' dgrads). The transfers are priced as the NCCL collective of the same bytes
(the copy engines' peer-copy bandwidth is not a published figure here).

`chunk_tp_overlap` rewrites a pass's node list (built with non-blocking TP collectives) into that pattern, so
both evaluators price it from the plan.
"""
from __future__ import annotations

from dataclasses import replace

from .opgraph import Comm, Compute, Node

MODES = ("userbuffers", "micro_pipeline")
"""How the chunks are exchanged (the framework file's `tp_overlap`; module docstring)."""


def overlap_mode(sc) -> str:
    """The scenario's framework's `tp_overlap` (`userbuffers` when its file says nothing)."""
    entry = sc.framework.spec.tp_overlap
    return entry.value if entry is not None else "userbuffers"


def wgrad_input_saved(sc) -> bool:
    """Whether the framework's column-parallel weight gradient reads the forward's gathered input (DTensor TP:
    autograd keeps it, or the recompute's all-gather re-makes it) instead of all-gathering it again."""
    entry = sc.framework.spec.tp_wgrad_input
    return entry is not None and entry.value == "saved"


def _part(op, frac: float, name: str, rows_of: int | None = None, repeat: int | None = None):
    """`op` scaled to `frac` of its work; a GEMM cut to 1/rows_of of its rows, run `repeat` times."""
    if isinstance(op, Comm):
        return replace(op, name=name, bytes=op.bytes * frac)
    shape = op.shape
    if rows_of and op.kind == "gemm":
        m, n, k = shape
        shape = (max(1, m // rows_of), n, k)
    return replace(op, name=name, flops=op.flops * frac, bytes=op.bytes * frac, shape=shape,
                   repeat=(repeat if repeat is not None else op.repeat))


def _is_tp(op, collective: str) -> bool:
    return isinstance(op, Comm) and op.dim == "tp" and op.collective == collective and not op.blocking


def _is_gemm(op) -> bool:
    return isinstance(op, Compute) and op.kind == "gemm"


def chunk_tp_overlap(nodes: tuple[Node, ...] | list[Node], t: int, mode: str = "userbuffers") -> tuple[Node, ...]:
    """The node list with every (all-gather -> GEMM) and (GEMM -> reduce-scatter) pair of non-blocking TP
    collectives replaced by its t-chunk pattern, as `mode` exchanges the chunks (module docstring). Other nodes
    keep their order; dependencies are renumbered (an old node's dependents wait for the new node that
    completes it)."""
    if mode not in MODES:
        raise ValueError(f"tp overlap mode {mode!r}: expected one of {', '.join(MODES)}")
    if t <= 1:
        return tuple(nodes)
    nodes = list(nodes)
    out: list[Node] = []
    done: dict[int, int] = {}   # old index -> new index that completes it
    after: dict[int, int] = {}  # a GEMM whose output was reduce-scattered -> the reduce-scatter's last chunk
    head_frac, rest_frac = 1.0 / t, (t - 1.0) / t

    def deps(old: tuple[int, ...], upto: int) -> tuple[int, ...]:
        new = set()
        for d in old:
            # a node after a GEMM -> reduce-scatter pair consumes the reduced output, not the GEMM's
            new.add(after[d] if d in after and upto > d else done[d])
        return tuple(sorted(new))

    held: list[int] = []  # unfused collectives made blocking: the next compute waits for them

    def add(op, dep: tuple[int, ...], tag: str) -> int:
        if isinstance(op, Compute) and held:
            dep = tuple(dep) + tuple(held)
            held.clear()
        out.append(Node(op, tuple(sorted(set(dep))), tag))
        return len(out) - 1

    i = 0
    while i < len(nodes):
        node = nodes[i]
        op = node.op
        nxt = nodes[i + 1] if i + 1 < len(nodes) else None
        if _is_tp(op, "all_gather") and nxt is not None and _is_gemm(nxt.op) and mode == "micro_pipeline":
            g = nxt
            # local shard into the symmetric buffer (read + write 1/t), then its GEMM chunk with no wait
            head = add(Compute(op.name + "_local_copy", "elementwise", 0.0, 2.0 * op.bytes / t, "bf16", (int(op.bytes / t),)),
                       deps(node.deps, i), node.tag)
            rest = add(replace(op, name=op.name + "_pulls"), (head,), node.tag)
            first = add(_part(g.op, head_frac, g.op.name + "_local", rows_of=t),
                        deps(tuple(d for d in g.deps if d != i), i + 1) + (head,), g.tag)
            prev = first
            if t > 2:
                prev = add(_part(g.op, (t - 2.0) / t, g.op.name + "_chunks", rows_of=t, repeat=g.op.repeat * (t - 2)),
                           (first,), g.tag)
            last = add(_part(g.op, head_frac, g.op.name + "_last", rows_of=t), (prev, rest), g.tag)
            done[i], done[i + 1] = rest, last
            i += 2
            continue
        if _is_gemm(op) and nxt is not None and _is_tp(nxt.op, "reduce_scatter") and mode == "micro_pipeline":
            r = nxt
            first = add(_part(op, head_frac, op.name + "_first", rows_of=t), deps(node.deps, i), node.tag)
            rest = add(replace(r.op, name=r.op.name + "_pulls"), (first,), r.tag)
            grest = add(_part(op, rest_frac, op.name + "_chunks", rows_of=t, repeat=op.repeat * (t - 1)), (first,), node.tag)
            # one kernel sums the t stacked partials: reads the whole GEMM output, writes 1/t of it
            red = add(Compute(r.op.name + "_reduce", "elementwise", 0.0, r.op.bytes * (1.0 + 1.0 / t), "bf16",
                              (int(r.op.bytes / t),)), (grest, rest), r.tag)
            done[i], done[i + 1] = grest, red
            after[i] = red
            i += 2
            continue
        if _is_tp(op, "all_gather") and nxt is not None and _is_gemm(nxt.op):
            g = nxt
            head = add(replace(op, name=op.name + "_chunk0", bytes=op.bytes * head_frac, blocking=True),
                       deps(node.deps, i), node.tag)
            rest = add(_part(op, rest_frac, op.name + "_rest"), (head,), node.tag)
            main = add(_part(g.op, rest_frac, g.op.name + "_chunks", rows_of=t, repeat=g.op.repeat * (t - 1)),
                       deps(tuple(d for d in g.deps if d != i), i + 1) + (head,), g.tag)
            last = add(_part(g.op, head_frac, g.op.name + "_last", rows_of=t), (main, rest), g.tag)
            done[i], done[i + 1] = rest, last
            i += 2
            continue
        if _is_gemm(op) and nxt is not None and _is_tp(nxt.op, "reduce_scatter"):
            r = nxt
            first = add(_part(op, head_frac, op.name + "_first", rows_of=t), deps(node.deps, i), node.tag)
            rest = add(_part(r.op, rest_frac, r.op.name + "_rest"), (first,), r.tag)
            grest = add(_part(op, rest_frac, op.name + "_chunks", rows_of=t, repeat=op.repeat * (t - 1)), (first,), node.tag)
            last = add(replace(r.op, name=r.op.name + "_chunk_last", bytes=r.op.bytes * head_frac, blocking=True),
                       (grest, rest), r.tag)
            done[i], done[i + 1] = grest, last
            after[i] = last
            i += 2
            continue
        if mode == "micro_pipeline" and (_is_tp(op, "all_gather") or _is_tp(op, "reduce_scatter")):
            # a collective the pass did not fuse runs as compiled vanilla TP runs it: its wait right before its use
            done[i] = add(replace(op, blocking=True), deps(node.deps, i), node.tag)
            held.append(done[i])
            i += 1
            continue
        done[i] = add(op, deps(node.deps, i), node.tag)
        i += 1
    return tuple(out)
