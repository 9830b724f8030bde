"""Collective probe: all-reduce, all-gather, reduce-scatter, all-to-all and send/recv over sizes and group
sizes, reported as nccl-tests does (time, algbw, busbw; docs/ecosystem.md §2.4).

One process per device is started with torch.multiprocessing (spawn): NCCL over the visible GPUs, or
gloo over CPU processes on 127.0.0.1. Every power-of-two group size up to the world is measured on ranks
0..g-1. A repeat's time is the slowest rank's; the point's time is the median (and mean) over repeats (GPU: CUDA
events, no barrier between repeats, like nccl-tests; CPU: a barrier before each repeat, then
perf_counter_ns). On CPU each point also gets `in_step_s`, the collective's cost inside a training step
(`_in_step`). Rank 0 reports entries to the parent through a queue; a worker that fails or hangs
becomes a `skipped` entry, never a crash of the calibration run.
"""
from __future__ import annotations

import math
import os
import queue as queue_mod
import socket
import sys
import time
from datetime import timedelta
from typing import Callable

import torch
import torch.distributed as dist

from .plan import CollectivePlan
from .timing import summarize

BUSBW_FACTOR: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "send_recv": lambda n: 1.0,
}
"""busbw = algbw x factor (nccl-tests doc/PERFORMANCE.md, docs/ecosystem.md §2.4)."""


def group_sizes(world: int) -> list[int]:
    return [g for g in (2 ** i for i in range(1, 31)) if g <= world]


def points(plan: CollectivePlan) -> int:
    return len(group_sizes(plan.max_world)) * len(plan.collectives) * len(plan.sizes)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ----------------------------------------------------------------------------------- in the workers

def _buffers(collective: str, size: int, g: int, device: torch.device):
    count = max(g, size // 4 // g * g)  # fp32 elements, divisible by the group
    x = torch.randn(count, device=device) + 0.5
    if collective == "all_gather":
        return x[: count // g].clone(), torch.empty(count, device=device)
    if collective == "reduce_scatter":
        return x, torch.empty(count // g, device=device)
    return x, torch.empty_like(x)


def _start(collective: str, inp, out, group, rank: int, g: int, async_op: bool = True) -> list:
    """Issue the collective: asynchronously (as DDP's bucket hooks, FSDP2's prefetch, the CP ring and the
    pipeline's P2P do), returning its work handles, or with `async_op=False` to completion (the blocking
    call), returning none."""
    if collective == "send_recv":
        # a ring: each rank sends to the next and receives from the previous (nccl-tests sendrecv_perf)
        works = dist.batch_isend_irecv([dist.P2POp(dist.isend, inp, (rank + 1) % g, group),
                                        dist.P2POp(dist.irecv, out, (rank - 1) % g, group)])
        if async_op:
            return works
        for w in works:
            w.wait()
        return []
    if collective == "all_reduce":
        work = dist.all_reduce(inp, group=group, async_op=async_op)
    elif collective == "all_gather":  # *_single is the 2.13 name of *_into_tensor / *_tensor
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        work = gather(out, inp, group=group, async_op=async_op)
    elif collective == "reduce_scatter":
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        work = scatter(out, inp, group=group, async_op=async_op)
    elif collective == "all_to_all":
        work = dist.all_to_all_single(out, inp, group=group, async_op=async_op)
    else:
        raise ValueError(collective)
    return [work] if async_op else []


def _op(collective: str, inp, out, group, rank: int, g: int) -> Callable[[], None]:
    """The collective's blocking call (what the isolated timing repeats)."""
    return lambda: _start(collective, inp, out, group, rank, g, async_op=False)


def _time_reps(fn, reps: int, device: torch.device, group) -> list[float]:
    if device.type == "cuda":
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
        for a, b in ev:
            a.record()
            fn()
            b.record()
        torch.cuda.synchronize(device)
        return [a.elapsed_time(b) * 1e-3 for a, b in ev]
    out = []
    for _ in range(reps):
        dist.barrier(group=group)
        t0 = time.perf_counter_ns()
        fn()
        out.append((time.perf_counter_ns() - t0) * 1e-9)
    return out


BURST_MKN = (256, 1536, 256)
"""The compute a rank runs while its collective is in flight in `_in_step` (m, k, n; ~1.3 ms fp32 on one
core of this project's VM: the FLOPs of `calibrate/replay/host_speed.PROBE_MKN`, k and n swapped)..."""
BURST_GEMMS = 2
"""...this many times: a few ms, the compute between two collectives of the replay scenarios."""
IN_STEP_REPS = 40


def _in_step(collective: str, inp, out, group, rank: int, g: int) -> float:
    """Seconds a gloo collective adds to a rank's step when it is issued and then compute runs, as in
    training: mean over repeats of the slowest rank's (issue; BURST_GEMMS GEMMs; wait) less the same
    GEMMs alone, the two interleaved so that both see the same host state. The mean, not the median: a
    repeat either finds the peer's thread awake (~the isolated time) or waits for the scheduler (a few
    ms), and a step with many collectives pays the mix; the median of such a two-valued sample flips
    between the two from one calibration to the next.

    On a host whose every core runs a rank, gloo's threads get no core of their own: the transfer waits
    for the compute to yield, and waking its thread costs more than the transfer (this project's 2-core
    VM: a 64 KB send/recv 0.2 ms after a barrier, 1-3.5 ms amid GEMMs; an exchange between compute
    kernels 2-4x its isolated time in traced replays)."""
    m, k, n = BURST_MKN
    a, b = torch.randn(m, k), torch.randn(k, n)

    def burst():
        for _ in range(BURST_GEMMS):
            torch.mm(a, b)
    with_op, alone = [], []
    for i in range(IN_STEP_REPS + 2):
        dist.barrier(group=group)
        t0 = time.perf_counter_ns()
        works = _start(collective, inp, out, group, rank, g)
        burst()
        for w in works:
            w.wait()
        t1 = time.perf_counter_ns()
        dist.barrier(group=group)
        t2 = time.perf_counter_ns()
        burst()
        t3 = time.perf_counter_ns()
        if i >= 2:  # the first two warm the threads and the GEMM
            with_op.append((t1 - t0) * 1e-9)
            alone.append((t3 - t2) * 1e-9)
    with_op = _slowest(with_op, group, inp.device)
    alone = _slowest(alone, group, inp.device)
    return summarize([w - a for w, a in zip(with_op, alone)]).mean_s


def _slowest(samples: list[float], group, device) -> list[float]:
    t = torch.tensor(samples, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return t.tolist()


def _measure(plan: CollectivePlan, collective: str, size: int, g: int, group, rank: int, device) -> dict:
    inp, out = _buffers(collective, size, g, device)
    fn = _op(collective, inp, out, group, rank, g)
    b = plan.budget
    warm = _slowest(_time_reps(fn, b.min_warmup, device, group), group, device)
    per = max(min(warm[1:] or warm), 1e-7)  # the fastest warm-up repeat after the first (see timing.measure)
    reps = int(min(b.max_reps, max(b.min_reps, math.ceil(b.target_s / per))))
    t = summarize(_slowest(_time_reps(fn, reps, device, group), group, device))
    nbytes = float(out.numel() * 4 if collective == "all_gather" else inp.numel() * 4)
    algbw = nbytes / t.time_s / 1e9
    entry = {"collective": collective, "backend": plan.backend, "group_size": g, "tier": "intra_node",
             "size_bytes": nbytes, "dtype": "fp32", **t.as_fields(), "algbw_gbs": algbw,
             "busbw_gbs": algbw * BUSBW_FACTOR[collective](g)}
    if device.type == "cpu":
        # never below the isolated cost: a faster difference is the GEMMs' own noise
        entry["in_step_s"] = max(t.mean_s, _in_step(collective, inp, out, group, rank, g))
    return entry


def worker(rank: int, world: int, port: int, plan: CollectivePlan, threads: int, q) -> None:
    """One rank of the sweep (started by `run`); rank 0 sends ('entry' | 'check' | 'skip' | 'progress' |
    'done' | 'error', payload) messages."""
    if plan.backend == "gloo" and sys.platform.startswith("linux"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(threads)
    device = torch.device("cuda", rank) if plan.backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    send = q.put if rank == 0 else (lambda msg: None)
    try:
        dist.init_process_group(plan.backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                timeout=timedelta(seconds=plan.timeout_s))
        x = torch.full((1024,), float(rank + 1), device=device)
        dist.all_reduce(x)
        err = float((x - world * (world + 1) / 2).abs().max())
        send(("check", {"probe": "collectives", "what": f"all_reduce sum {plan.backend} n={world}",
                        "max_error": err, "tolerance": 0.0, "ok": err == 0.0}))
        for g in group_sizes(world):
            group = dist.new_group(list(range(g))) if g < world else None
            if rank < g:
                for collective in plan.collectives:
                    for size in plan.sizes:
                        what = f"{collective} n={g} {size} B"
                        ok = torch.ones(1, device=device)
                        try:
                            entry = _measure(plan, collective, size, g, group, rank, device)
                        except torch.cuda.OutOfMemoryError as e:
                            ok.zero_()
                            entry = {"table": "collectives", "what": what, "reason": f"out of memory: {str(e)[:200]}"}
                        dist.all_reduce(ok, op=dist.ReduceOp.MIN, group=group)
                        send(("entry", entry) if ok.item() == 1 and "reason" not in entry else ("skip", entry))
                        send(("progress", what))
            dist.barrier()
        send(("done", None))
    except Exception as e:  # noqa: BLE001 (reported to the parent as a skipped table)
        send(("error", f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:300]))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


# ----------------------------------------------------------------------------------- in the parent

def run(plan: CollectivePlan, threads: int, on_progress: Callable[[str], None]) -> tuple[list, list, list]:
    """Start the workers and collect (entries, checks, skipped)."""
    entries, checks, skipped = [], [], []
    if plan.max_world < 2:
        return entries, checks, [{"table": "collectives", "what": "all", "reason": "only one device: no group to measure"}]
    ctx = torch.multiprocessing.get_context("spawn")
    q = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=worker, args=(r, plan.max_world, port, plan, threads, q), daemon=True)
             for r in range(plan.max_world)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + plan.timeout_s
    done = False
    reason = None
    try:
        while not done:
            try:
                kind, payload = q.get(timeout=0.5)
            except queue_mod.Empty:
                if time.monotonic() > deadline:
                    reason = f"timed out after {plan.timeout_s:.0f} s"
                    break
                if any(p.exitcode not in (None, 0) for p in procs):
                    codes = [p.exitcode for p in procs]
                    reason = f"a worker exited with code {next(c for c in codes if c not in (None, 0))}"
                    break
                if all(p.exitcode == 0 for p in procs):
                    reason = "workers exited without reporting"
                    break
                continue
            if kind == "entry":
                entries.append(payload)
            elif kind == "check":
                checks.append(payload)
            elif kind == "skip":
                skipped.append(payload)
            elif kind == "progress":
                on_progress(payload)
            elif kind == "error":
                reason = payload
                break
            elif kind == "done":
                done = True
    except BaseException:  # Ctrl-C or SIGTERM (calibrate/cli.py): stop the workers now, not after joins
        for p in procs:
            if p.is_alive():
                p.terminate()
        raise
    finally:
        for p in procs:
            p.join(timeout=10 if done else 2)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
    if reason is not None:
        skipped.append({"table": "collectives", "what": f"{plan.backend} sweep (after {len(entries)} points)",
                        "reason": reason})
    return entries, checks, skipped
