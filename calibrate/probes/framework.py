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
Times are the thread's CPU time (`time.thread_time_ns`), so another process taking the core does not
inflate them. `simulator/profile.py` (`Profile.framework_overhead`) turns them into the extra seconds per
simulator op (mode minus plain).
"""
from __future__ import annotations

import os
import socket
import time

import torch

from ..timing import summarize
from . import CheckResult, Context, Skip, Task

OPS_PER_SAMPLE = 16
"""Tiny ops chained per timed sample (one sample is their total / OPS_PER_SAMPLE)."""
SAMPLES = 60
WARMUP = 10
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


def _tp_worker(rank: int, port: int, q) -> None:
    """One of two gloo ranks: TP + SP blocks (PrepareModuleInput Shard(1) -> Replicate, a Colwise and a
    Rowwise nn.Linear with Shard(1) output: one all-gather and one reduce-scatter each way, torchtitan's
    plan) on tiny operands, and the raw gloo all-gather / reduce-scatter of the same bytes. Wall time after
    a barrier (the collectives wait for the other rank); rank 0 reports."""
    import torch.distributed as dist  # noqa: PLC0415
    from torch.distributed.device_mesh import init_device_mesh  # noqa: PLC0415
    from torch.distributed.tensor import Replicate, Shard  # noqa: PLC0415
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,  # noqa: PLC0415
                                                   RowwiseParallel, parallelize_module)
    try:
        torch.set_num_threads(1)
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
        dist.init_process_group("gloo", rank=rank, world_size=2)
        mesh = init_device_mesh("cpu", (2,))

        class Block(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.a = torch.nn.Linear(WIDTH, WIDTH, bias=False)
                self.b = torch.nn.Linear(WIDTH, WIDTH, bias=False)

            def forward(self, x):
                return self.b(self.a(x))
        blocks = torch.nn.Sequential(*[Block() for _ in range(TP_BLOCKS)])
        for blk in blocks:
            parallelize_module(blk, mesh, {"": PrepareModuleInput(input_layouts=(Shard(1),),
                                                                  desired_input_layouts=(Replicate(),)),
                                           "a": ColwiseParallel(), "b": RowwiseParallel(output_layouts=Shard(1))})
        x = torch.randn(1, 4, WIDTH, requires_grad=True)
        t, full = torch.randn(4 * WIDTH), torch.empty(8 * WIDTH)

        def timed(fn, setup=None, per=1):
            out = []
            for i in range(WARMUP + TP_SAMPLES):
                arg = setup() if setup is not None else None
                dist.barrier()
                t0 = time.perf_counter_ns()
                fn(arg)
                dt = (time.perf_counter_ns() - t0) * 1e-9 / per
                if i >= WARMUP:
                    out.append(dt)
            return out
        fwd = timed(lambda _: blocks(x), per=TP_BLOCKS)
        bwd = timed(lambda loss: loss.backward(), lambda: blocks(x).sum(), per=TP_BLOCKS)
        ag = timed(lambda _: dist.all_gather_into_tensor(full, t))
        rs = timed(lambda _: dist.reduce_scatter_tensor(t, full))
        if rank == 0:
            q.put([_entry("dtensor", "tp_block", "fwd", fwd), _entry("dtensor", "tp_block", "bwd", bwd),
                   _entry("plain", "collective", "step", [(a + r) / 2 for a, r in zip(ag, rs)])])
        dist.barrier()
        dist.destroy_process_group()
    except Exception as e:  # noqa: BLE001 (reported to the parent as a skip)
        if rank == 0:
            q.put(f"{type(e).__name__}: {e}")


TP_BLOCKS = 8
TP_SAMPLES = 40


def measure_tp_block(mode: str) -> list[dict]:
    import torch.multiprocessing as mp  # noqa: PLC0415
    from ..collectives import free_port  # noqa: PLC0415
    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    mp.start_processes(_tp_worker, args=(free_port(), q), nprocs=2, start_method="spawn", join=True)
    res = q.get() if not q.empty() else "no result from the TP workers"
    if isinstance(res, str):
        raise Skip(f"TP block on two gloo ranks: {res}")
    return res


MEASUREMENTS = (("tp_block", measure_tp_block, ("dtensor",)),
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
