"""What to measure: the points of every table, for a device and a mode (full / --quick / --scenario).

The default sweeps are a full m x n x k GEMM grid (what `simulator/profile.py` interpolates over) plus the
exact GEMM shapes of a few reference transformers, attention over sequence lengths and head dims,
memory-bound kernels over sizes, AdamW over parameter counts and collectives over sizes. `--scenario`
replaces the GEMM, attention and memory-bound sets by exactly the shapes that scenario's ops need
(read from `simulator.ops`, so calibration and simulation agree on shapes by construction).
No torch here: the probes (probes/) turn these specs into kernels.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from simulator.plan.opgraph import Compute
from simulator.plan.lower import build_plan, step_compute_ops
from simulator.cost.nccl_algorithms import COLLECTIVES
from simulator.cost.profile_schema import ELEMENTWISE_KINDS, MOE_KINDS, elementwise_kinds
from simulator.scenario import Scenario, scenario_from_mapping


@dataclass(frozen=True, kw_only=True)
class Budget:
    """How long to measure one point."""
    warmup_s: float
    """Warm-up time (at least `min_warmup` calls) before timing."""
    min_warmup: int
    min_reps: int
    max_reps: int
    target_s: float
    """Timed seconds aimed for: repeats = target / (time of one call), within [min_reps, max_reps]."""


@dataclass(frozen=True, kw_only=True)
class GemmSpec:
    dtype: str
    m: int
    n: int
    k: int
    set: str = "grid"


@dataclass(frozen=True, kw_only=True)
class AttentionSpec:
    dtype: str
    batch_heads: int
    s_q: int
    s_kv: int
    d_head: int
    causal: bool


@dataclass(frozen=True, kw_only=True)
class ElementwiseSpec:
    op: str
    """A simulator.cost.profile.ELEMENTWISE_KINDS name."""
    dtype: str
    elements: int
    width: int
    """Innermost dimension (hidden for norms, ffn for SwiGLU, head dim for RoPE, vocab for cross-entropy)."""
    table_rows: int = 0
    """Embedding table rows (the scenario's vocab / tp); 0 = the probe's default."""
    experts: int = 0
    """MoE kinds: experts routed to (moe_permute), or sorted by (row_gather: the local experts); 0 = the
    probe's default."""
    top_k: int = 0
    """MoE kinds: experts per token (elements = tokens x top_k x width); 0 = the probe's default."""


@dataclass(frozen=True, kw_only=True)
class CollectivePlan:
    backend: str
    """gloo (CPU processes) or nccl (GPUs)."""
    collectives: tuple[str, ...]
    sizes: tuple[int, ...]
    """Bytes, nccl-tests `size`."""
    max_world: int
    """Processes to start: every power-of-two group size up to it is measured."""
    budget: Budget
    timeout_s: float


@dataclass(frozen=True, kw_only=True)
class Plan:
    device_type: str
    quick: bool
    budget: Budget
    gemm: tuple[GemmSpec, ...]
    attention: tuple[AttentionSpec, ...]
    attention_backends: tuple[str, ...]
    math_max_work: float
    """The math back end materialises b*h*s_q*s_kv scores: points above this are skipped (memory, time)."""
    elementwise: tuple[ElementwiseSpec, ...]
    host_device_sizes: tuple[int, ...]
    optimizer_params: tuple[int, ...]
    optimizer_impls: tuple[str, ...]
    optimizer_tensor_elements: int
    """Largest parameter tensor of the optimizer probe (see probes/optimizer.py)."""
    collectives: CollectivePlan | None
    pool_cap_bytes: int
    """Largest rotating pool of random inputs (see timing.RandomPool)."""


ELEMENTWISE_WIDTH = {"rmsnorm": 1024, "layernorm": 1024, "swiglu": 2048, "gelu": 4096, "rope": 64,
                     "residual_add": 1024, "cross_entropy": 16384, "embedding": 1024, "copy": 1024, "upcast": 1024,
                     "moe_permute": 1024, "moe_unpermute": 1024, "row_gather": 1024}
"""Innermost dimension of the default memory-bound sweep (a mid-size model's hidden / ffn / head dim / vocab)."""

TRANSFORMERS_CPU = (("smollm-360m", 1, 256, 1),)
TRANSFORMERS_GPU = (("llama3-8b", 1, 4096, 1), ("llama3-8b", 2, 8192, 1), ("llama3-70b", 8, 4096, 1),
                    ("llama3-405b", 8, 8192, 1), ("gpt3-175b", 8, 2048, 1))
"""(preset, tp, seq_len, micro_batch) whose exact GEMM shapes join the grid: (model, tp) pairs people run."""


GPU_OPTIMIZER_IMPLS = ("default", "foreach", "fused", "for_loop")
"""AdamW's implementations on a GPU: PyTorch's default (foreach), fused, and the per-tensor loop the replay steps
(calibrate/replay/plan.py `OPTIMIZER_IMPL`; on an H200 it took 61 ms for 1.24 B parameters where foreach's curve
gives 27)."""
CPU_TENSOR_ELEMENTS = 1 << 18
"""Optimizer probe tensors on CPU: a 512 x 512 matrix, the size of the small models CPUs train."""
GPU_TENSOR_ELEMENTS = 1 << 24
"""...and on GPUs: a 4096 x 4096 matrix."""
SMALL_NK = (8,)
"""An extra small n and k on CPU grids: MoE routers are (tokens x experts x hidden) GEMMs with 4-8 experts."""


def _pow2(lo: int, hi: int, step: int = 2) -> tuple[int, ...]:
    out, x = [], lo
    while x <= hi:
        out.append(x)
        x *= step
    return tuple(out)


def _grid(dtype: str, ms, ns, ks) -> list[GemmSpec]:
    return [GemmSpec(dtype=dtype, m=m, n=n, k=k) for m in ms for n in ns for k in ks]


def _elementwise(dtypes, sizes) -> list[ElementwiseSpec]:
    """Every kind at every size in every dtype (an upcast from 16-bit dtypes only: its dtype is the source's)."""
    return [ElementwiseSpec(op=op, dtype=dt, elements=e, width=min(e, ELEMENTWISE_WIDTH[op]))
            for dt in dtypes for op in ELEMENTWISE_KINDS for e in sizes if op != "upcast" or dt in ("bf16", "fp16")]


def _attention(dtype, pairs, d_heads, causal=(True,)) -> list[AttentionSpec]:
    return [AttentionSpec(dtype=dtype, batch_heads=bh, s_q=s, s_kv=s, d_head=d, causal=c)
            for c in causal for d in d_heads for bh, s in pairs]


def transformer_gemms(models, topology: str, dtype: str) -> list[GemmSpec]:
    """Every GEMM shape (forward, dgrad, wgrad of QKV, out-proj, MLP, LM head) of reference models."""
    out = []
    for preset, tp, seq, mb in models:
        sc = scenario_from_mapping({
            "model": preset,
            "training": {"seq_len": seq, "global_batch": mb, "micro_batch": mb, "precision": dtype},
            "cluster": {"topology": topology, "nodes": 1, "gpus_per_node": tp},
            "parallel": {"tp": tp, "sp": tp > 1}})
        out += [GemmSpec(dtype=dtype, m=o.shape[0], n=o.shape[1], k=o.shape[2], set="transformer")
                for o in scenario_compute_ops(sc) if o.kind == "gemm"]
    return out


def _dedupe(specs):
    seen, out = set(), []
    for s in specs:
        key = (s.dtype, s.m, s.n, s.k) if isinstance(s, GemmSpec) else s
        if key not in seen:
            seen.add(key)
            out.append(s)
    return tuple(out)


def default_plan(device_type: str, quick: bool, fp8: bool = False, devices: int = 1, cpu_ranks: int = 2) -> Plan:
    """The generic sweep for a CPU (fp32; fits in < 5 min full / < 1 min quick on 2 cores) or a GPU."""
    if device_type == "cpu":
        if quick:
            gemm = _grid("fp32", (64, 256, 1024), *[SMALL_NK + (64, 256, 1024)] * 2)
            attention = _attention("fp32", [(4, 128), (4, 512), (16, 512)], (32, 64))
            elementwise = _elementwise(("fp32",), (1 << 14, 1 << 18))
            budget = Budget(warmup_s=0.005, min_warmup=2, min_reps=3, max_reps=50, target_s=0.015)
            coll = CollectivePlan(backend="gloo", collectives=COLLECTIVES, sizes=_pow2(1 << 10, 4 << 20, 16),
                                  max_world=cpu_ranks, timeout_s=120,
                                  budget=Budget(warmup_s=0.0, min_warmup=2, min_reps=3, max_reps=20, target_s=0.03))
            return Plan(device_type="cpu", quick=True, budget=budget, gemm=_dedupe(gemm), attention=tuple(attention),
                        attention_backends=("default", "flash", "math"), math_max_work=2 ** 24, elementwise=tuple(elementwise),
                        host_device_sizes=(), optimizer_params=(1 << 16, 1 << 20), optimizer_impls=("default", "fused"),
                        optimizer_tensor_elements=CPU_TENSOR_ELEMENTS, collectives=coll, pool_cap_bytes=64 << 20)
        ax = _pow2(32, 2048)
        gemm = (_grid("fp32", ax, SMALL_NK + ax, SMALL_NK + ax) + transformer_gemms(TRANSFORMERS_CPU, "cpu-host", "fp32")
                + _grid("bf16", *[(64, 256, 1024)] * 3))  # bf16 is slow on CPUs and not what the CPU replay runs
        pairs = [(4, 128), (4, 256), (4, 512), (4, 1024), (4, 2048), (16, 256), (16, 512), (16, 1024)]
        # head dim 32 is what the tiny replay models use (hidden 256, 8 heads)
        attention = _attention("fp32", pairs, (32, 64, 128)) + _attention("fp32", [(4, 256), (4, 1024)], (64,), (False,))
        budget = Budget(warmup_s=0.02, min_warmup=2, min_reps=5, max_reps=200, target_s=0.06)
        coll = CollectivePlan(backend="gloo", collectives=COLLECTIVES, sizes=_pow2(1 << 10, 64 << 20, 4),
                              max_world=cpu_ranks, timeout_s=300,
                              budget=Budget(warmup_s=0.0, min_warmup=2, min_reps=5, max_reps=100, target_s=0.12))
        return Plan(device_type="cpu", quick=False, budget=budget, gemm=_dedupe(gemm), attention=tuple(attention),
                    attention_backends=("default", "flash", "math"), math_max_work=2 ** 22,
                    elementwise=tuple(_elementwise(("fp32",), _pow2(1 << 12, 1 << 22, 4))), host_device_sizes=(),
                    optimizer_params=_pow2(1 << 16, 1 << 24, 4), optimizer_impls=("default", "foreach", "fused"),
                    optimizer_tensor_elements=CPU_TENSOR_ELEMENTS, collectives=coll, pool_cap_bytes=768 << 20)
    # CUDA
    low = ("bf16", "fp8") if fp8 else ("bf16",)
    if quick:
        ax = (256, 1024, 4096, 16384)
        gemm = [g for dt in low + ("fp32",) for g in _grid(dt, ax, ax, ax)]
        attention = _attention("bf16", [(16, 1024), (16, 4096), (64, 4096)], (128,), (True, False))
        elementwise = _elementwise(("bf16",), _pow2(1 << 16, 1 << 28, 16))
        budget = Budget(warmup_s=0.01, min_warmup=2, min_reps=10, max_reps=200, target_s=0.01)
        sizes, hd, opt = _pow2(1 << 10, 1 << 30, 16), _pow2(1 << 16, 1 << 28, 16), _pow2(1 << 20, 1 << 28, 16)
    else:
        mx, nk = _pow2(64, 16384), (16, 64) + _pow2(256, 16384)
        gemm = [g for dt in low for g in _grid(dt, mx, nk, nk)] + _grid("fp32", *[_pow2(256, 16384, 4)] * 3)
        gemm += [g for dt in low for g in transformer_gemms(TRANSFORMERS_GPU, "dgx-h100", dt)]
        pairs = [(bh, s) for bh in (16, 64) for s in _pow2(512, 16384)]
        attention = _attention("bf16", pairs, (64, 128), (True, False))
        elementwise = _elementwise(("bf16", "fp32"), _pow2(1 << 16, 1 << 28, 4))
        budget = Budget(warmup_s=0.025, min_warmup=3, min_reps=20, max_reps=1000, target_s=0.05)
        sizes, hd, opt = _pow2(1 << 10, 1 << 30, 4), _pow2(1 << 16, 1 << 30, 4), _pow2(1 << 20, 1 << 30, 4)
    coll = None
    if devices > 1:
        coll = CollectivePlan(backend="nccl", collectives=COLLECTIVES, sizes=sizes, max_world=devices, timeout_s=1200,
                              budget=Budget(warmup_s=0.0, min_warmup=5, min_reps=20, max_reps=200, target_s=0.05))
    return Plan(device_type="cuda", quick=quick, budget=budget, gemm=_dedupe(gemm), attention=tuple(attention),
                attention_backends=("default", "flash", "efficient", "cudnn", "math"), math_max_work=2 ** 31,
                elementwise=tuple(elementwise), host_device_sizes=hd, optimizer_params=opt,
                optimizer_impls=GPU_OPTIMIZER_IMPLS, optimizer_tensor_elements=GPU_TENSOR_ELEMENTS,
                collectives=coll, pool_cap_bytes=4 << 30)


# ----------------------------------------------------------------------------------- a scenario's shapes

def scenario_compute_ops(sc: Scenario) -> list[Compute]:
    """The distinct compute ops of one training step on every pipeline rank of `sc`, as the simulator's plan
    runs them (`simulator.plan.lower.step_compute_ops`): layers, embedding, LM head and loss, recomputation,
    and each rank's optimizer step on its shard."""
    return list(step_compute_ops(build_plan(sc)))


def elementwise_spec(sc: Scenario, op: Compute) -> ElementwiseSpec:
    z_h = sc.model.hidden
    kind = elementwise_kinds(op.name)[0]
    if kind in ("rmsnorm", "layernorm"):
        kind = "rmsnorm" if sc.model.arch == "llama" else "layernorm"
    elements = op.shape[0]
    width = {"rope": sc.model.d_head, "cross_entropy": -(-sc.model.vocab // sc.parallel.tp)}.get(kind, z_h)
    if kind in ("swiglu", "gelu"):
        width = (sc.model.moe.expert_ffn_hidden if op.name.startswith("expert") and sc.model.moe
                 else sc.model.ffn_hidden // sc.parallel.tp)
    if width <= 0 or elements % width:
        width = elements
    rows = -(-sc.model.vocab // sc.parallel.tp) if kind == "embedding" else 0
    experts = top_k = 0
    if kind in MOE_KINDS and sc.model.moe:
        moe = sc.model.moe
        experts = moe.experts // sc.parallel.ep if kind == "row_gather" else moe.experts
        top_k = 1 if kind == "row_gather" else moe.top_k
        width = z_h
        elements = max(1, elements // (width * top_k)) * width * top_k
    return ElementwiseSpec(op=kind, dtype=op.dtype, elements=elements, width=width, table_rows=rows,
                           experts=experts, top_k=top_k)


def scenario_plan(sc: Scenario, base: Plan) -> Plan:
    """`base` with its GEMM, attention and memory-bound sets replaced by exactly `sc`'s shapes, and `sc`'s
    optimizer sizes added (its collectives are the generic sweep: sizes and group sizes)."""
    ops = scenario_compute_ops(sc)
    gemm = [GemmSpec(dtype=o.dtype, m=o.shape[0], n=o.shape[1], k=o.shape[2], set="scenario")
            for o in ops if o.kind == "gemm"]
    attention = [AttentionSpec(dtype="bf16" if o.dtype == "fp8" else o.dtype, batch_heads=o.shape[0], s_q=o.shape[1],
                               s_kv=o.shape[2], d_head=o.shape[3], causal=o.shape[4] < 1.0)
                 for o in ops if o.kind == "attention"]
    elementwise = [elementwise_spec(sc, o) for o in ops if o.kind == "elementwise"]
    optimizer = sorted(set(base.optimizer_params) | {int(o.shape[0]) for o in ops if o.kind == "optimizer" and o.shape[0] > 0})
    return replace(base, gemm=_dedupe(gemm), attention=tuple(dict.fromkeys(attention)),
                   elementwise=tuple(dict.fromkeys(elementwise)), optimizer_params=tuple(optimizer))
