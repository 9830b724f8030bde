"""Attention's ops on one rank for one micro-batch: the kernel (flash, or eager attention's kernels), the mask's
share of its work (`documents.layer_mask`: packed documents, a sliding window), and context parallelism's K/V
exchange around it (all-gather, or the zig-zag ring of ring-flash-attention, RFA; docs/modeling.md §4.3).
`layer_ops` puts them in a layer's forward and backward.
"""
from __future__ import annotations

from dataclasses import replace

from ..scenario import Scenario
from .documents import layer_mask
from .eager_attention import EAGER, EAGER_DROPOUT, eager_kernels
from .fp8_attention import attention_dtype, backward_casts, cp_ring_bytes_per_element, forward_casts, fp8_attention_recipe
from .opgraph import Comm, Compute, OpList, Shard, elementwise


def attention_flops(z: Shard, s_kv: int, causal_fraction: float) -> float:
    """Forward 4*b*s_q*s_kv*d_h per head (QK^T and AV), times the causal fraction (FA benchmark)."""
    return 4.0 * z.b * z.s * s_kv * z.d_head * z.heads * causal_fraction


def attention_op(sc: Scenario, z: Shard, name: str, s_kv: int, causal_fraction: float, bwd: bool) -> Compute:
    """Flash: fwd 1x, bwd 2.5x (recomputes the scores, FA benchmark_flash_attention.py);
    bytes = Q, K, V, O (and dO, dQ, dK, dV in backward). Eager: the s^2 scores go through HBM."""
    phase = "bwd" if bwd else "fwd"
    shape = (z.b * z.heads, z.s, s_kv, z.d_head, causal_fraction, phase)
    if sc.training.attention == "eager":  # its kernels, every entry computed (`plan/eager_attention.py`)
        ks = eager_kernels(*shape[:4], phase, sc.model.hidden_dropout, z.ab)
        return Compute(name, "attention", sum(k.flops for k in ks), sum(k.bytes for k in ks), attention_dtype(sc, z),
                       shape + (EAGER_DROPOUT if sc.model.hidden_dropout else EAGER,))
    flops = attention_flops(z, s_kv, causal_fraction) * (2.5 if bwd else 1.0)
    io = (2 * z.T * z.q + 2 * z.b * s_kv * z.kv) * z.ab * (2 if bwd else 1)
    return Compute(name, "attention", flops, float(io), attention_dtype(sc, z), shape)


def masked(sc: Scenario, z: Shard, op: Compute, layer: int, ring: bool = False) -> Compute:
    """`op` of layer `layer` under its mask (`documents.layer_mask`: packed documents, a sliding window).

    Without CP: the b sequences priced as causal sequences of l_eff = min(mean piece, W) tokens, as many (bh')
    as make the shape's causal work equal the masked work, bh' = bh * cost_vs_causal * s(s+1) / (l_eff(l_eff+1))
    (for documents alone this is bh * s / l_eff: sum l(l+1) = sum l * (l_eff + 1) with l_eff = sum l^2 / sum l).
    A band of width W runs like a causal kernel of length W: with key blocks of B tokens each query block of
    the band walks W/B key blocks, two of them partial (the diagonal and the window's far edge), where a causal
    kernel of length W walks W/(2B) on average, one partial: the same share of masked blocks, 2B/W, which is
    what costs a masked kernel its speed; the band's longer key loop amortises each query block's prologue a
    little better, so the causal-W price errs slow by at most that. The efficiency is read at the shape's
    sqrt(s_q s_kv) = l_eff, the kernel's working length.

    With CP: the busiest rank's share of the masked work (`cp_busiest_vs_causal`); the ring's or the all-gather's
    traffic is unchanged, every K/V chunk still travels (a rank whose window does not reach a chunk still
    receives it to pass it on). Eager attention computes the masked entries too: unchanged."""
    pk = layer_mask(sc, layer)
    if pk is None or sc.training.attention == "eager":
        return op
    if sc.parallel.cp == 1 and not ring:
        l_eff = max(1, min(z.s, round(pk.kernel_tokens)))
        bh, _, _, d, frac, phase = op.shape
        scale = pk.cost_vs_causal * z.s * (z.s + 1) / (l_eff * (l_eff + 1))
        return replace(op, flops=op.flops * pk.cost_vs_causal, shape=(max(1, round(bh * scale)), l_eff, l_eff, d, frac, phase))
    return replace(op, flops=op.flops * pk.cp_busiest_vs_causal)


def kv_chunk_bytes(sc: Scenario, z: Shard) -> float:
    """This rank's local K and V chunk: what one CP ring step passes on, at the activations' bytes, or quantized
    under FP8 attention (`fp8_attention.cp_ring_bytes_per_element`)."""
    return float(2 * z.T * z.kv * cp_ring_bytes_per_element(sc, z))


def attention_forward(sc: Scenario, z: Shard, seq: OpList, layer: int) -> None:
    """The layer's attention forward: FP8 attention's quantization of Q, K, V first (`fp8_attention`), then the
    kernel (or the CP ring's steps), then O's dequantization where the recipe makes O in FP8."""
    _with_casts(seq, forward_casts(sc, z), lambda: _attention_forward_kernels(sc, z, seq, layer))


def _with_casts(seq: OpList, casts: tuple[list[Compute], list[Compute]], kernels) -> None:
    """The casts FP8 attention runs before and after its kernels (`fp8_attention`), around `kernels()`."""
    before, after = casts
    for op in before:
        seq.compute(op)
    kernels()
    for op in after:
        seq.compute(op)


def _attention_forward_kernels(sc: Scenario, z: Shard, seq: OpList, layer: int) -> None:
    c = sc.parallel.cp
    kv_bytes = kv_chunk_bytes(sc, z)
    if c == 1:
        seq.compute(masked(sc, z, attention_op(sc, z, "attn", z.s, 0.5, bwd=False), layer))
    elif sc.parallel.cp_comm == "allgather":
        seq.comm(Comm("cp_kv_allgather", "cp", "all_gather", kv_bytes * c))
        # local queries (head-tail balanced) against the whole gathered sequence: on average half of it
        seq.compute(masked(sc, z, attention_op(sc, z, "attn", z.s * c, 0.5, bwd=False), layer))
    else:
        # zig-zag ring (RFA): each step's block merged into the running output through the log-sum-exp
        # (fp32: read O, O_blk, write O)
        def after_step(i: int) -> None:
            if i > 0:
                seq.compute(elementwise(f"cp_merge{i}", z.T * z.q, 3, z, elt_bytes=4))
        _ring(sc, z, seq, layer, False, after_step)


def _ring(sc: Scenario, z: Shard, seq: OpList, layer: int, bwd: bool, after_step) -> None:
    """The zig-zag ring's c steps (RFA): step 0 is the local causal block, steps 1..c-1 unmasked half blocks
    against remote K/V (s_local queries x s_local/2 keys, or half the queries x all keys: the same work). Each
    step but the last passes the K/V chunk on as soon as it arrived (the first right after the QKV projection)
    and the next step waits for it; `after_step(i)` adds what follows step i's block."""
    c, tag = sc.parallel.cp, "_bwd" if bwd else ""
    kv_bytes = kv_chunk_bytes(sc, z)
    prev = None
    for i in range(c):
        extra = (prev,) if prev is not None else ()
        nxt = None
        if i < c - 1:
            nxt = seq.comm(Comm(f"cp_kv_ring{tag}{i}", "cp", "send_recv", kv_bytes, blocking=not sc.overlap_cp),
                           extra=extra, after_compute=(i == 0))
        seq.compute(ring_step_attention(sc, z, f"attn{tag}_step{i}", i, bwd=bwd, layer=layer), extra=extra)
        after_step(i)
        prev = nxt


def ring_step_attention(sc: Scenario, z: Shard, name: str, step: int, bwd: bool, layer: int) -> Compute:
    """Step 0: causal s_local x s_local; later steps: an unmasked s_local x s_local/2 block (zig-zag)."""
    if step == 0:
        return masked(sc, z, attention_op(sc, z, name, z.s, 0.5, bwd=bwd), layer, ring=True)
    return masked(sc, z, attention_op(sc, z, name, z.s // 2, 1.0, bwd=bwd), layer, ring=True)


def attention_backward(sc: Scenario, z: Shard, seq: OpList, layer: int) -> None:
    """The layer's attention backward: dO's quantization under FP8 attention, the kernel (or the ring), then dQ, dK,
    dV's dequantization where the recipe makes them in FP8 (`fp8_attention.backward_casts`)."""
    _with_casts(seq, backward_casts(sc, z), lambda: _attention_backward_kernels(sc, z, seq, layer))


def _attention_backward_kernels(sc: Scenario, z: Shard, seq: OpList, layer: int) -> None:
    c = sc.parallel.cp
    kv_bytes = kv_chunk_bytes(sc, z)
    if c == 1:
        seq.compute(masked(sc, z, attention_op(sc, z, "attn_bwd", z.s, 0.5, bwd=True), layer))
    elif sc.parallel.cp_comm == "allgather":
        seq.comm(Comm("cp_kv_allgather_bwd", "cp", "all_gather", kv_bytes * c))
        seq.compute(masked(sc, z, attention_op(sc, z, "attn_bwd", z.s * c, 0.5, bwd=True), layer))
        seq.comm(Comm("cp_dkv_reduce_scatter", "cp", "reduce_scatter", kv_bytes * c))
    else:
        # ring backward: K/V travel again (c-1 steps) and dK/dV travel with them (c steps) (RFA); each step
        # adds its block's dQ and dK/dV into fp32 accumulators. FP8 attention keeps each step's dK/dV partial and
        # exchanges them in one FP8 all-to-all after the last step (`fp8_attention` module docstring)
        fp8 = fp8_attention_recipe(sc) is not None

        def after_step(i: int) -> None:
            seq.compute(elementwise(f"cp_accumulate{i}_bwd", z.T * (z.q + 2 * z.kv), 3, z, elt_bytes=4))
            if not fp8:
                seq.comm(Comm(f"cp_dkv_ring{i}", "cp", "send_recv", kv_bytes, blocking=(i == c - 1) or not sc.overlap_cp))
            elif i == c - 1:
                seq.comm(Comm("cp_dkv_all_to_all", "cp", "all_to_all", c * kv_bytes))
        _ring(sc, z, seq, layer, True, after_step)
