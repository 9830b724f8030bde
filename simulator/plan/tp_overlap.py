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

`chunk_tp_overlap` rewrites a pass's node list (built with non-blocking TP collectives) into that pattern, so
both evaluators price it from the plan.
"""
from __future__ import annotations

from dataclasses import replace

from .opgraph import Comm, Compute, Node


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


def chunk_tp_overlap(nodes: tuple[Node, ...] | list[Node], t: int) -> tuple[Node, ...]:
    """The node list with every (all-gather -> GEMM) and (GEMM -> reduce-scatter) pair of non-blocking TP
    collectives replaced by its t-chunk ring-exchange pattern (module docstring). Other nodes keep their
    order; dependencies are renumbered (an old node's dependents wait for the new node that completes it)."""
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

    def add(op, dep: tuple[int, ...], tag: str) -> int:
        out.append(Node(op, tuple(sorted(set(dep))), tag))
        return len(out) - 1

    i = 0
    while i < len(nodes):
        node = nodes[i]
        op = node.op
        nxt = nodes[i + 1] if i + 1 < len(nodes) else None
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
        done[i] = add(op, deps(node.deps, i), node.tag)
        i += 1
    return tuple(out)
