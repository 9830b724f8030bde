"""Memory-bound probe: RMSNorm, LayerNorm, SwiGLU, GeLU, rotary, residual add, cross-entropy over the
vocabulary, embedding lookup, device copy, MoE routing gathers (forward and backward), and host-device
copies (GPU only).

Each kernel is written the way plain PyTorch model code calls it (the replay and most trainers); achieved
GB/s counts bytes by simulator.ops's convention (elements x passes x element bytes, docs/modeling.md §7.3), so a
profile point prices exactly the op the simulator emits for the same tensor. Backward: `autograd.grad`
of a retained graph.
"""
from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F

from simulator.plan.fusion import ROPE_EAGER, SWIGLU_EAGER
from simulator.plan.opgraph import CROSS_ENTROPY_BYTES, GELU_PASSES, NORM_PASSES, RESIDUAL_PASSES

from ..plan import ElementwiseSpec
from ..replay.experts import permute, sort_rows, unpermute
from ..timing import Pools, RandomPool, measure
from . import CHECK_TOLERANCE, DTYPES, CheckResult, Context, Task, relative_error, run_check, tensor

EAGER_PASSES = {"rope": ROPE_EAGER, "swiglu": SWIGLU_EAGER}
"""Kinds the probe runs as several PyTorch kernels (`forward`: rotate-half RoPE, silu then mul), counted at their
eager chains' bytes (simulator/plan/fusion.py, per bf16 element; passes = bytes / 2): a point then prices an eager
op (torchtitan without compile, the autocast replay) at the time measured, and a fused kernel's fewer bytes at the
bandwidth the chain reached."""
PASSES = {"rmsnorm": NORM_PASSES, "layernorm": NORM_PASSES, "gelu": GELU_PASSES,
          **{k: (c.eager_bytes[0] / 2, c.eager_bytes[1] / 2) for k, c in EAGER_PASSES.items()},
          "residual_add": RESIDUAL_PASSES, "cross_entropy": CROSS_ENTROPY_BYTES,
          "embedding": (2, 3), "copy": (2, None), "upcast": (3, None), "moe_permute": (2, 2), "moe_unpermute": (2, 2), "row_gather": (2, 2)}
"""(forward, backward) passes over the tensor (cross_entropy: bytes per logit, its element size 1); cross_entropy
and embedding as simulator.plan.step_ops.head_forward / embedding_forward count them; a copy reads and writes once
and has no backward; an upcast reads its 16-bit tensor and writes an fp32 copy (2 + 4 B: three passes of the 16-bit
element) and has no backward; the MoE gathers as simulator.ops counts `permute`, `unpermute`, `ep_sort` and `ep_unsort` (one
read and one write of the tokens x top_k rows)."""
EPS = 1e-5
EMBEDDING_MIN_ROWS = 64
"""The default embedding table has as many rows as the lookup (at least this many), so that its dense
backward, which writes the whole table gradient, scales with the lookup the way simulator.ops counts
bytes; --scenario uses the scenario's own vocab/tp."""
ROPE_HEADS = 8
"""Heads sharing one cos/sin row in the rotary probe (they broadcast over heads in real models)."""
MOE_EXPERTS, MOE_TOP_K = 8, 2
"""The MoE kinds' routing when the spec does not give one (Mixtral's 8 experts, top-2)."""
BWD_GRAPHS = 4
"""Retained forward graphs a backward measurement rotates through."""


def conventional_bytes(spec: ElementwiseSpec, phase: str) -> float:
    passes = PASSES[spec.op][0 if phase == "fwd" else 1]
    elt = 1 if spec.op == "cross_entropy" else torch.empty((), dtype=DTYPES[spec.dtype]).element_size()
    return float(spec.elements * passes * elt)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def _rows(spec: ElementwiseSpec) -> int:
    return spec.elements // spec.width


def _routing(spec: ElementwiseSpec) -> tuple[int, int]:
    """(experts, top_k) of the MoE kinds."""
    return spec.experts or MOE_EXPERTS, spec.top_k or (1 if spec.op == "row_gather" else MOE_TOP_K)


def layout(spec: ElementwiseSpec) -> list[tuple[int, ...]]:
    """Shapes of the random operands one call reads (the embedding's table and indices, and the routing's
    logits and orders, are in `_extra`; a copy writes its second operand). The MoE kinds' rows are
    tokens x top_k."""
    r, w = _rows(spec), spec.width
    k = _routing(spec)[1]
    return {"rmsnorm": [(r, w), (w,)], "layernorm": [(r, w), (w,), (w,)], "swiglu": [(r, 2 * w)], "gelu": [(r, w)],
            "rope": [(r, w)], "residual_add": [(r, w), (r, w)], "cross_entropy": [(r, w)], "embedding": [],
            "copy": [(r, w), (r, w)], "upcast": [(r, w)], "moe_permute": [(r // k, w)], "moe_unpermute": [(r, w), (r // k, k)],
            "row_gather": [(r, w)]}[spec.op]


def forward(spec: ElementwiseSpec, ops: list[torch.Tensor], extra: dict) -> torch.Tensor:
    """The kernel(s) for spec.op; `extra` holds the non-random inputs (targets, indices, cos/sin, table)."""
    w = spec.width
    if spec.op == "rmsnorm":
        return F.rms_norm(ops[0], (w,), ops[1], EPS)
    if spec.op == "layernorm":
        return F.layer_norm(ops[0], (w,), ops[1], ops[2], EPS)
    if spec.op == "swiglu":
        gate, up = ops[0].chunk(2, dim=-1)
        return F.silu(gate) * up
    if spec.op == "gelu":
        return F.gelu(ops[0], approximate="tanh")
    if spec.op == "rope":
        x = ops[0].view(-1, extra["heads"], w)
        return x * extra["cos"] + _rotate_half(x) * extra["sin"]
    if spec.op == "residual_add":
        return ops[0] + ops[1]
    if spec.op == "cross_entropy":
        return F.cross_entropy(ops[0].float(), extra["target"])
    if spec.op == "embedding":
        return F.embedding(extra["index"], extra["table"])
    if spec.op == "copy":
        return ops[1].copy_(ops[0])
    if spec.op == "upcast":
        return ops[0].float()
    if spec.op == "moe_permute":
        experts, k = _routing(spec)
        return permute(ops[0], extra["logits"], k, experts)[0]
    if spec.op == "moe_unpermute":
        return unpermute(ops[0], extra["order"], ops[1])
    if spec.op == "row_gather":
        return sort_rows(ops[0], extra["row_expert"])[0]
    raise ValueError(spec.op)


def grad_inputs(spec: ElementwiseSpec, ops: list[torch.Tensor], extra: dict) -> list[torch.Tensor]:
    if spec.op == "embedding":
        return [extra["table"]]
    n = {"rmsnorm": 2, "layernorm": 3, "residual_add": 2, "moe_unpermute": 2}.get(spec.op, 1)
    return ops[:n]


def extra_inputs(spec: ElementwiseSpec, device: torch.device, seed: int, grad: bool = False) -> dict:
    dtype = DTYPES[spec.dtype]
    gen = torch.Generator(device="cpu").manual_seed(seed)
    r, w = _rows(spec), spec.width
    if spec.op == "rope":
        heads = ROPE_HEADS if r % ROPE_HEADS == 0 else 1
        pos = torch.arange(r // heads, dtype=torch.float64)[:, None] / 10000 ** (torch.arange(w // 2) * 2 / w)
        ang = torch.cat([pos, pos], dim=-1)[:, None, :]
        return {"heads": heads, "cos": ang.cos().to(device, dtype), "sin": ang.sin().to(device, dtype)}
    if spec.op == "cross_entropy":
        return {"target": torch.randint(0, w, (r,), generator=gen).to(device)}
    if spec.op == "embedding":
        rows = spec.table_rows or max(r, EMBEDDING_MIN_ROWS)
        table = (torch.randn((rows, w), generator=gen) + 0.05).to(device, dtype).requires_grad_(grad)
        return {"index": torch.randint(0, rows, (r,), generator=gen).to(device), "table": table}
    experts, k = _routing(spec)
    if spec.op == "moe_permute":  # router logits: not a gradient input here (the router's backward is a GEMM)
        return {"logits": torch.randn((r // k, experts), generator=gen).to(device, dtype)}
    if spec.op == "moe_unpermute":  # the order moe_permute produced: rows sorted by expert
        return {"order": torch.argsort(torch.randint(0, experts, (r,), generator=gen), stable=True).to(device)}
    if spec.op == "row_gather":  # rows arrive grouped by source rank, each group sorted by local expert
        return {"row_expert": torch.randint(0, experts, (r,), generator=gen).to(device)}
    return {}


def _reference(spec: ElementwiseSpec, ops: list[torch.Tensor], extra: dict) -> torch.Tensor:
    """The same maths written out in float64."""
    d = [o.double() for o in ops]
    if spec.op == "rmsnorm":
        return d[0] * torch.rsqrt(d[0].pow(2).mean(-1, keepdim=True) + EPS) * d[1]
    if spec.op == "layernorm":
        mu = d[0].mean(-1, keepdim=True)
        var = (d[0] - mu).pow(2).mean(-1, keepdim=True)
        return (d[0] - mu) / torch.sqrt(var + EPS) * d[1] + d[2]
    if spec.op == "swiglu":
        gate, up = d[0].chunk(2, dim=-1)
        return gate * torch.sigmoid(gate) * up
    if spec.op == "gelu":
        x = d[0]
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    if spec.op == "rope":
        x = d[0].view(-1, extra["heads"], spec.width)
        x1, x2 = x.chunk(2, dim=-1)
        return x * extra["cos"].double() + torch.cat((-x2, x1), dim=-1) * extra["sin"].double()
    if spec.op == "residual_add":
        return d[0] + d[1]
    if spec.op == "cross_entropy":
        logp = torch.log_softmax(d[0], dim=-1)
        return -logp.gather(1, extra["target"][:, None]).mean()
    if spec.op == "embedding":
        return extra["table"].double()[extra["index"]]
    if spec.op in ("copy", "upcast"):
        return d[0]
    if spec.op == "moe_permute":  # token t's slot j goes to expert top[t][j]; rows by expert, then by (t, j)
        experts, k = _routing(spec)
        top = extra["logits"].topk(k, dim=-1).indices.tolist()  # the probe's own choice; the gather is checked
        slots = sorted(((e, t, j) for t, row in enumerate(top) for j, e in enumerate(row)))
        return d[0][[t for _, t, _ in slots]]
    if spec.op == "moe_unpermute":
        order, (tokens, k) = extra["order"].tolist(), ops[1].shape
        back = torch.empty_like(d[0])
        back[order] = d[0]  # row i came from slot order[i]
        return (back.view(tokens, k, -1) * d[1].unsqueeze(-1)).sum(1)
    if spec.op == "row_gather":
        ids = extra["row_expert"].tolist()
        return d[0][sorted(range(len(ids)), key=lambda i: (ids[i], i))]
    raise ValueError(spec.op)


def checks(ctx: Context) -> list[CheckResult]:
    out = []
    for op, dtype in sorted({(s.op, s.dtype) for s in ctx.plan.elementwise}):
        spec = ElementwiseSpec(op=op, dtype=dtype, elements=64 * 128, width=128)

        def err(spec=spec) -> float:
            extra = extra_inputs(spec, ctx.device, ctx.seed)
            ops = [tensor(s, DTYPES[dtype], ctx.device, ctx.seed + j) for j, s in enumerate(layout(spec))]
            return relative_error(forward(spec, ops, extra), _reference(spec, ops, extra))
        # cross-entropy runs in fp32 whatever the activations (Megatron), so its tolerance is fp32's
        tol = CHECK_TOLERANCE["fp32" if op == "cross_entropy" else dtype]
        out.append(run_check(f"elementwise {op} {dtype}", "memory", tol, err))
    return out


def runner(spec: ElementwiseSpec, phase: str, pool: RandomPool, seed: int = 0) -> Callable[[int], object]:
    """Call i: the forward on the i-th operand set, or the backward of one of BWD_GRAPHS retained graphs."""
    shapes = layout(spec)
    device = pool.data.device
    if phase == "fwd":
        extra = extra_inputs(spec, device, seed)

        def fwd(i: int):
            with torch.no_grad():
                return forward(spec, pool.take(shapes, i), extra)
        return fwd
    if spec.op == "residual_add":
        # an add passes its gradient through without a kernel; the backward's kernel is where the residual stream
        # forks: autograd sums the two branches' gradients of x (read both, write the sum: RESIDUAL_PASSES[1])
        def fork_sum(i: int):
            g1, g2 = pool.take(shapes, i)
            return g1 + g2
        return fork_sum
    graphs = []
    for g in range(BWD_GRAPHS):
        extra = extra_inputs(spec, device, seed + g, grad=True)
        ops = [o.detach().requires_grad_() for o in pool.take(shapes, g)]
        y = forward(spec, ops, extra)
        graphs.append((y, grad_inputs(spec, ops, extra), torch.ones_like(y)))

    def bwd(i: int):
        y, inputs, dy = graphs[i % BWD_GRAPHS]
        return torch.autograd.grad(y, inputs, dy, retain_graph=True)
    return bwd


def tasks(ctx: Context) -> list[Task]:
    pools = Pools(ctx.device, ctx.plan.pool_cap_bytes, ctx.seed)
    for s in ctx.plan.elementwise:
        pools.need(DTYPES[s.dtype], layout(s))

    def run(spec: ElementwiseSpec, phase: str) -> dict:
        t = measure(runner(spec, phase, pools.get(DTYPES[spec.dtype]), ctx.seed), ctx.device, ctx.plan.budget)
        nbytes = conventional_bytes(spec, phase)
        return {"op": spec.op, "phase": phase, "dtype": spec.dtype, "elements": spec.elements, "bytes": nbytes,
                **t.as_fields(), "gbs": nbytes / t.time_s / 1e9}

    out = [Task(table="elementwise", what=f"{s.op} {phase} {s.dtype} {s.elements} elements",
                requires=f"elementwise {s.op} {s.dtype}", run=lambda s=s, p=phase: run(s, p))
           for s in ctx.plan.elementwise for phase in ("fwd", "bwd") if phase == "fwd" or PASSES[s.op][1] is not None]
    if ctx.device.type == "cuda":
        out += host_device_tasks(ctx)
    return out


def host_device_tasks(ctx: Context) -> list[Task]:
    def run(nbytes: int, direction: str, pinned: bool) -> dict:
        host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned).fill_(1)
        dev = torch.empty(nbytes, dtype=torch.uint8, device=ctx.device)
        src, dst = (host, dev) if direction == "h2d" else (dev, host)
        t = measure(lambda i: dst.copy_(src, non_blocking=pinned), ctx.device, ctx.plan.budget)
        return {"direction": direction, "pinned": pinned, "bytes": float(nbytes), **t.as_fields(),
                "gbs": nbytes / t.time_s / 1e9}

    return [Task(table="host_device", what=f"{d} {'pinned' if p else 'pageable'} {n} B", requires="",
                 run=lambda n=n, d=d, p=p: run(n, d, p))
            for n in ctx.plan.host_device_sizes for d in ("h2d", "d2h") for p in (True, False)]
