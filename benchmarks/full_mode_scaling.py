"""How `--full` (every rank simulated) scales with the GPU count (issue 42, item 4: an every-rank mode whose
cost is linear in its events; Llama-3-405B on 16,384 GPUs with --full <= 60 s on the 2-core machine).

Llama-3-405B (scenarios/405b_16k.yaml: TP8 PP16, 1F1B, m = 16 micro-batches, ZeRO-1, link sharing on) with
the data-parallel degree shrunk and the global batch shrunk with it, so every rank does the same work at
every size: only the number of ranks grows. Each row is one run from scratch (lowering and templates
included), one process, in this order. Events are SimPy's; events/s should not fall as ranks grow.

    python benchmarks/full_mode_scaling.py [--gpus 1024,2048,...] [--profile N] [--no-contention]

`--profile N` runs the N-GPU case under cProfile and prints the top functions by own time. The machine's
load average is printed with the table: numbers taken while others run are noisy (wall s counts the time
other processes took the cores; CPU s does not). Peak RSS is the process's, so far (rows run in order).

Measured on the 2-core machine (AMD EPYC), Python 3.11.7, shared with other jobs:

Before (commit 94ae586), load average 2.18 -> 5.15:

      GPUs   wall s    CPU s      events  events/CPU-s  peak RSS MiB    step s
      1024     1.75     1.62      85,116        52,381            73   11.6245
      2048     6.41     4.35     168,444        38,724            90   11.6364
      4096    18.22    11.79     330,492        28,031           124   11.6464
      8192    62.30    37.38     659,869        17,655           221   11.6773
     16384   209.05   103.77   1,318,813        12,709           387   11.7274

What grew faster than the events (cProfile, 1,024 vs 4,096 and 2,048 vs 8,192 GPUs):
- the link model re-shared the connected set of transfers after every start and end. The dp ranks of a
  group send their pipeline messages at the same instant onto the links of one data-parallel collective
  they all share, so each send re-shared a set of ~dp transfers: ranks x dp work (7,695 fillings over
  257,400 flows at 8,192 GPUs; 15 instants held them all). Now one re-share per instant, each connected
  set on its own (links.py; speeds and ends bit-identical);
- CPython's cyclic garbage collector: its full collections scan every live object, and more objects live
  long enough to reach the old generation as ranks grow (4,096 GPUs: 25 full collections, 3.5 of 10.5
  CPU-s). Off while the engine's clock runs (sim.py);
- layout.coords searched the whole rank grid for each group (O(world) per group, ~2 s of setup at
  16,384 GPUs): now unravelled.

After, load average 4.64 -> 4.32:

      GPUs   wall s    CPU s      events  events/CPU-s  peak RSS MiB    step s
      1024     1.73     1.16      85,116        73,178            73   11.6245
      2048     3.82     2.58     168,444        65,291            90   11.6364
      4096    14.99     5.80     330,492        57,028           125   11.6464
      8192    22.89    14.30     659,884        46,140           222   11.6773
     16384    29.63    28.12   1,318,828        46,908           387   11.7274

(another run at load 3.9 -> 5.3: 57,553 / 52,238 / 45,429 / 38,876 / 36,306 events/CPU-s, 16,384 GPUs
in 56.9 s wall, 36.3 CPU-s.) `python -m simulator run scenarios/405b_16k.yaml --full`: 49.3 s wall,
32.6 CPU-s, 374 MB peak RSS at load 3.5-4.0.

The work per event is now flat: 80.2 and 80.6 Python function calls per event at 1,024 and 8,192 GPUs
(cProfile). Events per CPU-second still fall by about a third from 1,024 to 16,384 GPUs: the working
set (16,384 rank processes, their states and SimPy's event heap) outgrows the caches (1 MB L2 here).
Bare SimPy shows it: 1,024 vs 16,384 processes each doing 80 random timeouts and touching a small state
of its own (a dict and a 20-item list) fall from 1.05M to 0.55-0.60M events/s on this machine (without
the state: 1.14M to 0.85-0.94M); with link sharing off the engine goes 92k -> 66k events/CPU-s (1,024
-> 16,384 GPUs, load 3.7 -> 4.5).
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from simulator.cost.costs import build_cost_model  # noqa: E402
from simulator.evaluate.engine import simulate_engine  # noqa: E402
from simulator.scenario import load_scenario  # noqa: E402

SCENARIO = ROOT / "scenarios" / "405b_16k.yaml"
GPUS_PER_DP = 8 * 16
"""TP8 x PP16: GPUs per data-parallel replica."""
MICRO_BATCHES = 16
BAR_S = 60.0


def scenario(gpus: int):
    dp = gpus // GPUS_PER_DP
    return load_scenario(SCENARIO, [f"parallel.dp={dp}", f"cluster.nodes={gpus // 8}",
                                    f"training.global_batch={dp * MICRO_BATCHES}"])


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run(gpus: int, contention: bool):
    sc = scenario(gpus)
    cost = build_cost_model(sc)
    c0, t0 = time.process_time(), time.perf_counter()
    res = simulate_engine(sc, cost, full=True, contention=contention)
    return time.perf_counter() - t0, time.process_time() - c0, res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", default="1024,2048,4096,8192,16384", help="comma-separated GPU counts (multiples of 128)")
    ap.add_argument("--profile", type=int, default=0, help="profile this GPU count instead (top 30 by own time)")
    ap.add_argument("--no-contention", action="store_true", help="engine without link sharing between transfers")
    args = ap.parse_args(argv)
    if args.profile:
        sc = scenario(args.profile)
        cost = build_cost_model(sc)
        prof = cProfile.Profile()
        prof.enable()
        simulate_engine(sc, cost, full=True, contention=not args.no_contention)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(30)
        return 0
    load0 = os.getloadavg()
    rows = []
    for gpus in (int(g) for g in args.gpus.split(",")):
        wall, cpu, res = run(gpus, not args.no_contention)
        rows.append((gpus, wall, cpu, res.events, res.iteration_time_s, peak_rss_mib()))
        print(f"  {gpus:>6} GPUs: {wall:.2f} s wall", file=sys.stderr, flush=True)
    load1 = os.getloadavg()
    print(f"load average (1/5/15 min) before: {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}   "
          f"after: {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}   cores: {os.cpu_count()}   "
          f"link sharing: {'off' if args.no_contention else 'on'}")
    head = f"{'GPUs':>6} {'wall s':>8} {'CPU s':>8} {'events':>11} {'events/CPU-s':>13} {'peak RSS MiB':>13} {'step s':>9}"
    print(head)
    print("-" * len(head))
    ok = True
    for gpus, wall, cpu, events, step, rss in rows:
        print(f"{gpus:>6} {wall:>8.2f} {cpu:>8.2f} {events:>11,} {events / cpu:>13,.0f} {rss:>13,.0f} {step:>9.4f}")
        if gpus == 16384:
            ok = wall <= BAR_S
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
