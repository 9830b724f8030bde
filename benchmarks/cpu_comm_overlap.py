"""Does communication hide behind compute on this CPU machine? (the cpu-host topology's
`node.comm_overlaps_compute`, simulator/topology.py)

    python benchmarks/cpu_comm_overlap.py [--ranks 2] [--reps 15]

Two (or --ranks) gloo processes, one torch thread each, as the replay runs them. For each buffer size:
a GEMM loop alone, a gloo all-reduce alone, and the all-reduce issued asynchronously before the same GEMM
loop and waited for after it. hidden = (gemm + comm - both) / comm: 1 when the collective ran entirely
behind the GEMMs (as NCCL beside GPU kernels), 0 when the two took turns on the cores. Medians of --reps
after three warm-up rounds; the load average is printed: other processes on the cores change the numbers.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SIZES_MB = (0.25, 1.0, 4.0, 16.0)
GEMM_N = 512
GEMMS = 10
WARMUP = 3


def _worker(rank: int, world: int, port: int, reps: int, q) -> None:
    import torch  # noqa: PLC0415
    import torch.distributed as dist  # noqa: PLC0415
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    a = torch.randn(GEMM_N, GEMM_N)

    def gemm():
        for _ in range(GEMMS):
            a @ a
    for mb in SIZES_MB:
        buf = torch.randn(int(mb * 1e6 / 4))

        def both():
            work = dist.all_reduce(buf, async_op=True)
            gemm()
            work.wait()
        row = {}
        for name, fn in (("gemm", gemm), ("comm", lambda: dist.all_reduce(buf)), ("both", both)):
            times = []
            for i in range(WARMUP + reps):
                dist.barrier()
                t0 = time.perf_counter()
                fn()
                if i >= WARMUP:
                    times.append(time.perf_counter() - t0)
            row[name] = statistics.median(times)
        if rank == 0:
            q.put((mb, row))
    if rank == 0:
        q.put(None)
    dist.barrier()
    dist.destroy_process_group()


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args(argv)
    try:
        import torch.multiprocessing as mp  # noqa: PLC0415
    except ImportError:
        print("needs torch (pip install -e '.[calibrate]' -c constraints.txt)", file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT))
    from calibrate.collectives import free_port  # noqa: PLC0415
    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    mp.start_processes(_worker, args=(args.ranks, free_port(), args.reps, q), nprocs=args.ranks,
                       start_method="spawn", join=True)
    print(f"{args.ranks} gloo ranks, 1 thread each, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    print(f"{'all-reduce':>10} {'gemm ms':>8} {'comm ms':>8} {'both ms':>8} {'hidden':>7}")
    while (item := q.get()) is not None:
        mb, r = item
        hidden = (r["gemm"] + r["comm"] - r["both"]) / r["comm"]
        print(f"{mb:>8.2f}MB {r['gemm'] * 1e3:>8.2f} {r['comm'] * 1e3:>8.2f} {r['both'] * 1e3:>8.2f} {hidden:>7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
