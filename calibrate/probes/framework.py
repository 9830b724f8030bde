"""Framework probe: the host time per op that isolated kernel probes do not see.

The kernel probes time one kernel call on plain tensors with autograd off. A training step runs the same
kernels through nn.Module calls with autograd recording (and, under tensor parallelism or FSDP2, through
DTensor's sharding propagation): on a CPU, where dispatch and kernel run in the same thread one after the
other, that host time adds to every op. This probe measures it on tiny operands (the kernel itself is then
negligible), per op, for three modes:

| mode | what runs |
|---|---|
| plain | no autograd, plain tensors (what the kernel probes include) |
| eager | nn.Linear / a tensor op with autograd recording; backward timed separately |
| dtensor | the same through DTensor on a one-rank mesh: Colwise/Rowwise-parallel nn.Linear (torchtitan's TP plan), an elementwise op on a Shard(1) DTensor (sequence-parallel norms, residuals) |

and one AdamW step per parameter tensor (plain tensors vs DTensor parameters, as FSDP2 and TP hold them).
Two two-rank gloo probes time what a parallel layout adds around its collectives: `tp_block` (DTensor's
redistributes under TP + SP) and `fsdp_block` (FSDP2's per-unit all-gather copy-in/out, hooks and
reduce-scatter copy-in under ZeRO, at several unit sizes: the copies grow with the bytes).
Times are the thread's CPU time (`time.thread_time_ns`), so another process taking the core does not
inflate them. `simulator/profile.py` (`Profile.framework_overhead`) turns them into the extra seconds per
simulator op (mode minus plain).
"""
from __future__ import annotations

import os
import socket
import time
import warnings
from datetime import timedelta

import torch

from ..timing import summarize
from . import CheckResult, Context, Skip, Task

OPS_PER_SAMPLE = 16
"""Tiny ops chained per timed sample (one sample is their total / OPS_PER_SAMPLE)."""
SAMPLES = 60
WARMUP = 10
GLOO_TIMEOUT_S = 60
"""A collective of the two-rank probes that has not completed in this long raises (gloo's process-group
timeout): every one of them takes milliseconds, and on this project's VM a gloo all-gather under DTensor
once never completed, hanging a calibration for 10 minutes."""
TWO_RANK_DEADLINE_S = 600
"""Wall seconds one two-rank measurement may take (~20-60 s normally) before its ranks are stopped."""
TWO_RANK_ATTEMPTS = 2
"""A two-rank measurement that failed or hung is run once more, in fresh processes, before it is skipped."""
WIDTH = 8
"""Operand width: 4 x 8 activations, 8 x 8 weights (the kernel is a few ns)."""


def _mesh():
    """A one-rank gloo DeviceMesh in this process (DTensor needs a process group)."""
    import torch.distributed as dist  # noqa: PLC0415
    from torch.distributed.device_mesh import init_device_mesh  # noqa: PLC0415
    if not dist.is_available():
        raise Skip("torch.distributed is not available")
    if not dist.is_initialized():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ["MASTER_PORT"] = str(port)
        dist.init_process_group("gloo", rank=0, world_size=1)
    return init_device_mesh("cpu", (1,))


def _sample(fn, setup=None) -> list[float]:
    """CPU seconds per op: fn() runs OPS_PER_SAMPLE ops; setup() (untimed) returns fn's argument."""
    out = []
    for i in range(WARMUP + SAMPLES):
        arg = setup() if setup is not None else None
        t0 = time.thread_time_ns()
        fn(arg)
        dt = (time.thread_time_ns() - t0) * 1e-9 / OPS_PER_SAMPLE
        if i >= WARMUP:
            out.append(dt)
    return out


def _entry(mode: str, op: str, phase: str, samples: list[float]) -> dict:
    return {"mode": mode, "op": op, "phase": phase, **summarize(samples).as_fields()}


def _linears(dtensor: bool):
    mods = torch.nn.Sequential(*[torch.nn.Linear(WIDTH, WIDTH, bias=False) for _ in range(OPS_PER_SAMPLE)])
    if dtensor:
        from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,  # noqa: PLC0415
                                                       parallelize_module)
        mesh = _mesh()
        for i in range(0, OPS_PER_SAMPLE, 2):
            parallelize_module(mods[i], mesh, ColwiseParallel())
            parallelize_module(mods[i + 1], mesh, RowwiseParallel())
    return mods


def measure_linear(mode: str) -> list[dict]:
    x = torch.randn(4, WIDTH)
    if mode == "plain":
        mods = _linears(False)

        def fwd(_):
            with torch.no_grad():
                mods(x)
        return [_entry("plain", "linear", "fwd", _sample(fwd))]
    mods = _linears(mode == "dtensor")
    xg = x.clone().requires_grad_(True)

    def fwd(_):
        mods(xg)

    def build():
        return mods(xg).sum()

    def bwd(loss):
        loss.backward()
    return [_entry(mode, "linear", "fwd", _sample(fwd)), _entry(mode, "linear", "bwd", _sample(bwd, build))]


def measure_elementwise(mode: str) -> list[dict]:
    x = torch.randn(4, WIDTH)
    if mode == "dtensor":
        from torch.distributed.tensor import Shard, distribute_tensor  # noqa: PLC0415
        x = distribute_tensor(x, _mesh(), [Shard(0)])
    if mode == "plain":
        def fwd(_):
            with torch.no_grad():
                y = x
                for _ in range(OPS_PER_SAMPLE):
                    y = y * 1.0001
        return [_entry("plain", "elementwise", "fwd", _sample(fwd))]
    xg = x.detach().clone().requires_grad_(True)

    def chain():
        y = xg
        for _ in range(OPS_PER_SAMPLE):
            y = y * 1.0001
        return y

    def bwd(y):
        y.sum().backward()
    return [_entry(mode, "elementwise", "fwd", _sample(lambda _: chain())),
            _entry(mode, "elementwise", "bwd", _sample(bwd, chain))]


def measure_optimizer(mode: str) -> list[dict]:
    params = [torch.nn.Parameter(torch.randn(WIDTH, WIDTH)) for _ in range(OPS_PER_SAMPLE)]
    if mode == "dtensor":
        from torch.distributed.tensor import Shard, distribute_tensor  # noqa: PLC0415
        mesh = _mesh()
        params = [torch.nn.Parameter(distribute_tensor(p.detach(), mesh, [Shard(0)])) for p in params]
    for p in params:
        p.grad = torch.full_like(p, 1e-3)
    opt = torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)

    def step(_):
        opt.step()
    return [_entry(mode, "optimizer", "step", _sample(step))]


class _Block(torch.nn.Module):
    """Linear(w, out) then Linear(out, w), no bias: a TP block (Colwise then Rowwise) or, with the
    residual, an FSDP unit."""

    def __init__(self, w: int, out: int, residual: bool = False):
        super().__init__()
        self.a = torch.nn.Linear(w, out, bias=False)
        self.b = torch.nn.Linear(out, w, bias=False)
        self.residual = residual

    def forward(self, x):
        y = self.b(self.a(x))
        return x + y if self.residual else y


def _join_two_ranks(rank: int, port: int):
    """This process as one of two gloo ranks, one torch thread; returns the two-rank DeviceMesh."""
    import torch.distributed as dist  # noqa: PLC0415
    from torch.distributed.device_mesh import init_device_mesh  # noqa: PLC0415
    warnings.filterwarnings("ignore", category=FutureWarning)  # all_gather_into_tensor's rename notice
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=timedelta(seconds=GLOO_TIMEOUT_S))
    return init_device_mesh("cpu", (2,))


def _barrier_timed(samples: int, fn, setup=None, per: float = 1) -> list[float]:
    """Wall seconds of fn(setup()) after a barrier (the peer's collectives meet ours), / per; warm-up dropped."""
    import torch.distributed as dist  # noqa: PLC0415
    out = []
    for i in range(WARMUP + samples):
        arg = setup() if setup is not None else None
        dist.barrier()
        t0 = time.perf_counter_ns()
        fn(arg)
        if i >= WARMUP:
            out.append((time.perf_counter_ns() - t0) * 1e-9 / per)
    return out


def _tp_entries(mesh) -> list[dict]:
    """Rows measured on one of two gloo ranks: TP + SP blocks (PrepareModuleInput Shard(1) -> Replicate, a Colwise and a
    Rowwise nn.Linear with Shard(1) output: one all-gather and one reduce-scatter each way, torchtitan's
    plan) at TP_SHAPES (tokens, width), the same rank-local GEMMs as plain modules (eager: Linear(W, W/2),
    Linear(W/2, W) on all tokens), and the raw gloo all-gather / reduce-scatter of the same bytes. Wall
    time after a barrier (the collectives wait for the other rank); rank 0 reports. The tiny shape gives
    the fixed host cost per collective, the larger ones what grows with the bytes (DTensor's copies to
    gather and scatter along the sequence dimension)."""
    import torch.distributed as dist  # noqa: PLC0415
    from torch.distributed.tensor import Replicate, Shard  # noqa: PLC0415
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,  # noqa: PLC0415
                                                   RowwiseParallel, parallelize_module)

    def timed(fn, setup=None, per=1):
        return _barrier_timed(TP_SAMPLES, fn, setup, per)
    entries = []
    for tokens, w in TP_SHAPES:
        nbytes = float(tokens * w * 4)  # one collective's full buffer (fp32 activations)
        for mode in ("dtensor", "eager"):
            blocks = torch.nn.Sequential(*[_Block(w, w if mode == "dtensor" else w // 2) for _ in range(TP_BLOCKS)])
            if mode == "dtensor":
                for blk in blocks:
                    parallelize_module(blk, mesh, {"": PrepareModuleInput(input_layouts=(Shard(1),),
                                                                          desired_input_layouts=(Replicate(),)),
                                                   "a": ColwiseParallel(), "b": RowwiseParallel(output_layouts=Shard(1))})
                x = torch.randn(1, tokens // 2, w, requires_grad=True)  # this rank's sequence shard
            else:
                x = torch.randn(1, tokens, w, requires_grad=True)
            fwd = timed(lambda _: blocks(x), per=TP_BLOCKS)
            bwd = timed(lambda loss: loss.backward(), lambda: blocks(x).sum(), per=TP_BLOCKS)
            extra = {"bytes": nbytes}
            entries += [_entry(mode, "tp_block", "fwd", fwd) | extra, _entry(mode, "tp_block", "bwd", bwd) | extra]
        t, full = torch.randn(tokens * w // 2), torch.empty(tokens * w)
        ag = timed(lambda _: dist.all_gather_into_tensor(full, t))
        rs = timed(lambda _: dist.reduce_scatter_tensor(t, full))
        entries.append(_entry("plain", "collective", "step", [(a + r) / 2 for a, r in zip(ag, rs)]) | {"bytes": nbytes})
    return entries


TP_BLOCKS = 8
TP_SAMPLES = 40
TP_SHAPES = ((4, 8), (64, 256), (256, 256))
"""(tokens, width) of the tp_block probe: one collective moves tokens x width fp32 (128 B, 64 KB, 256 KB)."""
FSDP_WIDTHS = (8, 128, 256)
"""fsdp_block widths W: a unit is Linear(W, 4W) + Linear(4W, W), 8 W^2 fp32 parameters (2 KB, 0.5 MB, 2.1 MB)."""
FSDP_BLOCKS = 6
FSDP_SAMPLES = 20


def _fsdp_entries(mesh) -> list[dict]:
    """Rows measured on one of two gloo ranks: FSDP_BLOCKS units, each `fully_shard`ed with reshard_after_forward (ZeRO-3:
    all-gather in forward, again in backward, reduce-scatter of the gradients) inside a root unit, against
    the same blocks unsharded, and the raw gloo all-gather (twice) and reduce-scatter of one unit's bytes.
    Wall time per unit after a barrier; rank 0 reports."""
    import torch.distributed as dist  # noqa: PLC0415
    from torch.distributed.fsdp import fully_shard  # noqa: PLC0415
    entries = []
    for w in FSDP_WIDTHS:
        nbytes = 8.0 * w * w * 4
        x = torch.randn(1, 4, w)
        for mode in ("eager", "fsdp"):
            blocks = torch.nn.Sequential(*[_Block(w, 4 * w, residual=True) for _ in range(FSDP_BLOCKS)])
            if mode == "fsdp":
                for blk in blocks:
                    fully_shard(blk, mesh=mesh, reshard_after_forward=True)
                fully_shard(blocks, mesh=mesh, reshard_after_forward=True)
            state = {}

            def fwd():
                state["loss"] = blocks(x).sum()

            def bwd():
                state["loss"].backward()
            f, b = [], []
            for i in range(WARMUP + FSDP_SAMPLES):
                dist.barrier()
                t0 = time.perf_counter_ns()
                fwd()
                t1 = time.perf_counter_ns()
                bwd()
                t2 = time.perf_counter_ns()
                blocks.zero_grad(set_to_none=True)
                if i >= WARMUP:
                    f.append((t1 - t0) * 1e-9 / FSDP_BLOCKS)
                    b.append((t2 - t1) * 1e-9 / FSDP_BLOCKS)
            entries += [_entry(mode, "fsdp_block", "fwd", f) | {"bytes": nbytes},
                        _entry(mode, "fsdp_block", "bwd", b) | {"bytes": nbytes}]
        full, shard = torch.empty(int(nbytes) // 4), torch.empty(int(nbytes) // 8)

        def raw():
            dist.all_gather_into_tensor(full, shard)
            dist.all_gather_into_tensor(full, shard)
            dist.reduce_scatter_tensor(shard, full)
        entries.append(_entry("plain", "fsdp_collectives", "step", _barrier_timed(FSDP_SAMPLES, lambda _: raw()))
                       | {"bytes": nbytes})
    return entries


def _rank_main(rank: int, port: int, q, entries_fn) -> None:
    """One of the two spawned ranks: join, measure, rank 0 reports the rows (or the error as a skip)."""
    import torch.distributed as dist  # noqa: PLC0415
    try:
        entries = entries_fn(_join_two_ranks(rank, port))
        if rank == 0:
            q.put(entries)
        dist.barrier()
        dist.destroy_process_group()
    except Exception as e:  # noqa: BLE001 (reported to the parent as a skip)
        if rank == 0:
            q.put(f"{type(e).__name__}: {e}")


def _tp_worker(rank: int, port: int, q) -> None:
    _rank_main(rank, port, q, _tp_entries)


def _fsdp_worker(rank: int, port: int, q) -> None:
    _rank_main(rank, port, q, _fsdp_entries)


def _two_ranks(worker, what: str) -> list[dict]:
    """Rank 0's rows from `worker` on two spawned gloo ranks; a failure or a hang (past
    TWO_RANK_DEADLINE_S, the ranks are then terminated) is tried once more, then becomes a Skip."""
    import torch.multiprocessing as mp  # noqa: PLC0415
    from ..collectives import free_port  # noqa: PLC0415
    reasons = []
    for _ in range(TWO_RANK_ATTEMPTS):
        q = mp.get_context("spawn").SimpleQueue()
        procs = mp.start_processes(worker, args=(free_port(), q), nprocs=2, start_method="spawn", join=False)
        deadline = time.monotonic() + TWO_RANK_DEADLINE_S
        try:
            while not procs.join(timeout=1.0):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no result within {TWO_RANK_DEADLINE_S} s")
            res = q.get() if not q.empty() else f"no result from the {what} workers"
        except Exception as e:  # noqa: BLE001 (a rank that died or hung: reported, then tried again)
            res = f"{type(e).__name__}: {e}"
        finally:
            for p in procs.processes:
                if p.is_alive():
                    p.terminate()
                    p.join(timeout=5)
        if not isinstance(res, str):
            return res
        reasons.append(res)
    raise Skip(f"{what} on two gloo ranks: {'; then '.join(reasons)}")


def measure_tp_block(mode: str) -> list[dict]:
    return _two_ranks(_tp_worker, "TP block")


def measure_fsdp_block(mode: str) -> list[dict]:
    return _two_ranks(_fsdp_worker, "FSDP2 block")


MEASUREMENTS = (("tp_block", measure_tp_block, ("dtensor",)),
                ("fsdp_block", measure_fsdp_block, ("fsdp",)),
                ("linear", measure_linear, ("plain", "eager", "dtensor")),
                ("elementwise", measure_elementwise, ("plain", "eager", "dtensor")),
                ("optimizer", measure_optimizer, ("plain", "dtensor")))


def checks(ctx: Context) -> list[CheckResult]:
    return []


def tasks(ctx: Context) -> list[Task]:
    out = []
    for op, fn, modes in MEASUREMENTS:
        for mode in modes:
            def run(fn=fn, mode=mode) -> list[dict]:
                if ctx.device.type != "cpu":
                    raise Skip("framework overhead is measured on CPU only (on a GPU it overlaps the kernels)")
                return fn(mode)
            out.append(Task(table="framework", what=f"framework {mode} {op}", requires="", run=run))
    return out
