"""Host-copy bandwidth of one GPU: what `topology.GPUSpec.host_link_gbs` (activation offloading, `plan/offload.py`)
stands for, measured the way Transformer Engine's offload copies run: pinned host buffers, `copy_(non_blocking=True)`
on a side stream (the copy engines, no SMs), device-to-host and host-to-device, alone and both at once.

    python validation/host_copy_gpu.py [--sizes-mb 64,256,1024,4096] [--repeats 5] [--out DIR]

Prints a table (GB/s = 1e9 bytes/s, the median of `--repeats` timed copies after one warm-up, CUDA events), and with
`--out` writes `host_copy_gpu.json` there with the device name, torch version and date. One GPU only: a node whose GPUs
all copy at once shares its CPU sockets' PCIe lanes or the superchip's C2C link and memory, which this does not measure
(the topologies' figures are per GPU with every GPU copying). Exit code 2 without a CUDA GPU.
"""
from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
from pathlib import Path


def cuda_torch(what: str):
    """torch where it is installed and sees a CUDA GPU; else None, after saying why on stderr (the caller exits 2).
    `what`: what the script measures, for the message."""
    try:
        import torch
    except ImportError:
        print("error: torch is not installed", file=sys.stderr)
        return None
    if not torch.cuda.is_available():
        print(f"error: no CUDA GPU (this measures {what})", file=sys.stderr)
        return None
    return torch


def measure(torch, nbytes: int, direction: str, repeats: int) -> float:
    """Median GB/s of `repeats` copies of `nbytes` in `direction` (d2h | h2d | both: one each way at once, their
    summed bytes over the time both take)."""
    dev = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    dev2 = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    host2 = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    out_stream, in_stream = torch.cuda.Stream(), torch.cuda.Stream()
    times = []
    for i in range(repeats + 1):
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        if direction in ("d2h", "both"):
            out_stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(out_stream):
                host.copy_(dev, non_blocking=True)
        if direction in ("h2d", "both"):
            in_stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(in_stream):
                dev2.copy_(host2, non_blocking=True)
        torch.cuda.current_stream().wait_stream(out_stream)
        torch.cuda.current_stream().wait_stream(in_stream)
        end.record()
        end.synchronize()
        if i:
            times.append(start.elapsed_time(end) / 1e3)
    moved = nbytes * (2 if direction == "both" else 1)
    return moved / statistics.median(times) / 1e9


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes-mb", default="64,256,1024,4096")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    torch = cuda_torch("a GPU's copies to and from pinned host memory")
    if torch is None:
        return 2
    sizes = [int(x) for x in a.sizes_mb.split(",")]
    rows = []
    for mb in sizes:
        row = {"mb": mb}
        for d in ("d2h", "h2d", "both"):
            row[d] = measure(torch, mb * 2**20, d, a.repeats)
        rows.append(row)
    name = torch.cuda.get_device_name(0)
    print(f"host copies on {name} (torch {torch.__version__}), pinned, one side stream per direction, GB/s:")
    print(f"{'MiB':>6}  {'d2h':>7}  {'h2d':>7}  {'both (sum)':>10}")
    for r in rows:
        print(f"{r['mb']:>6}  {r['d2h']:>7.1f}  {r['h2d']:>7.1f}  {r['both']:>10.1f}")
    if a.out:
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "host_copy_gpu.json").write_text(json.dumps(
            {"device": name, "torch": torch.__version__, "date": datetime.date.today().isoformat(), "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
