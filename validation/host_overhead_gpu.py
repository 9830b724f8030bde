"""Host (CPU) time a PyTorch step spends issuing GPU work, on one GPU: the inputs a host clock per op would need
(the host wait of token-dropless MoE dispatch is not priced yet; docs/accuracy.md and the corpus README say which rows
it blocks). Measured, printed as a table and written with `--out`:

- `eager op`: host microseconds per small eager op (an in-place add on a 1,024-element tensor), issued back to back
  while the GPU keeps up, so the host is the bottleneck (the CPU-side cost of an op: dispatcher, allocator, launch);
- `linear fwd`: host microseconds per `torch.nn.functional.linear` call on a 16 x 1,024 input (a GEMM op through
  cuBLAS);
- `d2h sync`: microseconds from an idle GPU for the pattern Megatron's dropless dispatcher waits on (a 128-element
  device-to-host copy on a side stream into pinned memory, then `event.synchronize()`), median of many;
- `graph replay`: host microseconds to replay a captured CUDA graph of 100 small kernels.

    python validation/host_overhead_gpu.py [--ops 20000] [--out DIR]

These are one machine's figures (its CPU model is printed), not a published benchmark; the TransformerEngine modules
Megatron runs cost more per call than a bare op. Exit code 2 without a CUDA GPU.
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from host_copy_gpu import cuda_torch  # noqa: E402


def _per_call_us(fn, n: int) -> float:
    """Host microseconds per call of `fn` over `n` calls (after 200 warm-up calls), the GPU left to catch up after."""
    for _ in range(200):
        fn()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6


def measure(torch, ops: int) -> dict:
    x = torch.zeros(1024, device="cuda")
    a, w = torch.randn(16, 1024, device="cuda", dtype=torch.bfloat16), torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    eager = _per_call_us(lambda: x.add_(1.0), ops)
    torch.cuda.synchronize()
    linear = _per_call_us(lambda: torch.nn.functional.linear(a, w), ops // 4)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    dev = torch.arange(128, device="cuda")
    host = torch.empty(128, dtype=dev.dtype, pin_memory=True)
    syncs = []
    for _ in range(500):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            host.copy_(dev, non_blocking=True)
            ev = torch.cuda.Event()
            ev.record()
        ev.synchronize()
        syncs.append((time.perf_counter() - t0) * 1e6)
    g = torch.cuda.CUDAGraph()
    y = torch.zeros(1024, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            y.add_(1.0)
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        for _ in range(100):
            y.add_(1.0)
    torch.cuda.synchronize()
    replay = _per_call_us(g.replay, max(100, ops // 100))
    torch.cuda.synchronize()
    return {"eager_op_us": eager, "linear_fwd_us": linear, "d2h_sync_us": statistics.median(syncs),
            "graph_replay_100_kernels_us": replay}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=20000)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    torch = cuda_torch("the host's cost of issuing GPU work")
    if torch is None:
        return 2
    r = measure(torch, a.ops)
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(l.split(":", 1)[1].strip() for l in Path("/proc/cpuinfo").read_text().splitlines() if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    name = torch.cuda.get_device_name(0)
    print(f"host cost of issuing GPU work on {name}, CPU {cpu}, torch {torch.__version__}, microseconds:")
    for k, v in r.items():
        print(f"  {k:<28} {v:8.2f}")
    if a.out:
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "host_overhead_gpu.json").write_text(json.dumps(
            {"device": name, "cpu": cpu, "torch": torch.__version__, "date": datetime.date.today().isoformat(), **r}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
